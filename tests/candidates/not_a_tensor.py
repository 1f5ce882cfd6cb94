"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (returns a nested Python list, not a tensor)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor):
        return torch.relu(x).tolist()
