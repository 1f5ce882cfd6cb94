import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer whose weight (2.3 MiB) is large enough to leave the reference's worker as a descriptor."""

    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return self.fc(x)


n = 784


def get_inputs():
    return [torch.rand(4, n)]


def get_init_inputs():
    return [n]
