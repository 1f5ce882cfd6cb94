import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-layer perceptron: Linear+ReLU hidden layers and a linear output layer."""

    def __init__(self, input_size: int, layer_sizes: list, output_size: int):
        super().__init__()
        layers = []
        for size in layer_sizes:
            layers += [nn.Linear(input_size, size), nn.ReLU()]
            input_size = size
        layers.append(nn.Linear(input_size, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


batch_size = 2048
input_size = 4096
layer_sizes = [8192, 4096]
output_size = 1024


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, list(layer_sizes), output_size]


KBV_PROFILES = {"small": {"batch_size": 32, "input_size": 256, "layer_sizes": [256, 128], "output_size": 64}}
