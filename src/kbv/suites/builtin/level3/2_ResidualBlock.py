import torch
import torch.nn as nn


class Model(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, identity skip, ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


batch_size = 16
channels = 64
height = 128
width = 128


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


KBV_PROFILES = {"small": {"batch_size": 2, "channels": 16, "height": 32, "width": 32}}
