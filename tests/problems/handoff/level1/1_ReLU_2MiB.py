import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU with a 2 MiB output: large enough that the candidate's outputs reach the judge as descriptors."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(512, 1024)]


def get_init_inputs():
    return []
