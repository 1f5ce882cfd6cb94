"""Bad candidate for level1/5_ReLU -- expected verdict: timeout (infinite loop at import, i.e. in the compile stage)."""
import torch
import torch.nn as nn

while True:
    pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
