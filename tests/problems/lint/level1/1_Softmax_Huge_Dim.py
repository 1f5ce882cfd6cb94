import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over a huge last dimension: every output is about 1/dim (< 7e-6 here), so all-zeros and the mean pass
    KernelBench's allclose(atol=1e-2). kbv's verified check rejects both (the outputs' variation is resolvable, and
    a constant scores 1.0 on the centred criterion): kbv lint reports it clean, with zeros and constant under
    standard_only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 1
dim = 262144


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
