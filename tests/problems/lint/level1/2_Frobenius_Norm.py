import torch
import torch.nn as nn


class Model(nn.Module):
    """Frobenius-norm normalisation x / ||x||_F of a large tensor: outputs are tiny (< 7e-3 here), so all-zeros
    passes KernelBench's allclose(atol=1e-2); kbv's scale-relative atol rejects it. kbv lint reports it clean, with
    zeros under standard_only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.linalg.vector_norm(x)


batch_size = 64
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
