import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear then dropout, left in training mode (KernelBench's default): the output depends on the RNG state, so
    no kernel with its own random draws can match it (kbv lint: stochastic)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)
        self.dropout = nn.Dropout(p=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x))


def get_inputs():
    return [torch.rand(32, 64)]


def get_init_inputs():
    return []
