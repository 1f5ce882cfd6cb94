"""Bad candidate for level1/5_ReLU -- expected verdict: runtime_error (forward calls os._exit(0); the process vanishes)."""
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)
