import torch
import torch.nn as nn


class Model(nn.Module):
    """Two conv-ReLU-maxpool stages, flatten, linear classifier for square images of a fixed size."""

    def __init__(self, in_channels: int, hidden_channels: int, num_classes: int, image_size: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, hidden_channels, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_channels, 2 * hidden_channels, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * hidden_channels * (image_size // 4) ** 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


batch_size = 256
in_channels = 3
hidden_channels = 64
num_classes = 1000
image_size = 64


def get_inputs():
    return [torch.rand(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, hidden_channels, num_classes, image_size]


KBV_PROFILES = {"small": {"batch_size": 4, "hidden_channels": 16, "num_classes": 10, "image_size": 32}}
