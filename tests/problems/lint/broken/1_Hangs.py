import time

import torch
import torch.nn as nn


class Model(nn.Module):
    """A problem whose forward hangs (kbv lint must time it out and report error)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return x


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
