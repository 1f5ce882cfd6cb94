import torch
import torch.nn as nn


class Model(nn.Module):
    """A wide linear layer on one row: 256 MiB of weights, little work."""

    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return self.fc(x)


n = 8192


def get_inputs():
    return [torch.rand(1, n)]


def get_init_inputs():
    return [n]
