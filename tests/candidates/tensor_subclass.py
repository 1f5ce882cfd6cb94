"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (correct values, but a torch.Tensor subclass, not exactly torch.Tensor)."""
import torch
import torch.nn as nn


class SneakyTensor(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).as_subclass(SneakyTensor)
