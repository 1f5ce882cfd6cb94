"""Bad candidate for level1/5_ReLU -- expected verdict: compile_error (sys.exit(3) at import)."""
import sys

import torch
import torch.nn as nn

sys.exit(3)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
