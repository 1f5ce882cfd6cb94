"""Correct ReLU that also writes 16 bytes just past the end of its input (an off-by-one store, done with ctypes)."""
import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.relu(x)
        if x.device.type == "cpu":
            end = x.data_ptr() + x.numel() * x.element_size()
            ctypes.memset(end, 0x7F, 16)
        return out
