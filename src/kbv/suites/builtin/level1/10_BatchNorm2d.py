import torch
import torch.nn as nn


class Model(nn.Module):
    """2D batch normalization using batch statistics (training mode)."""

    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


batch_size = 8
features = 64
height = 256
width = 256


def get_inputs():
    return [torch.rand(batch_size, features, height, width)]


def get_init_inputs():
    return [features]


KBV_PROFILES = {"small": {"batch_size": 4, "features": 16, "height": 32, "width": 32}}
