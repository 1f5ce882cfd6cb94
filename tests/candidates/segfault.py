"""Bad candidate for level1/5_ReLU -- expected verdict: runtime_error (forward segfaults; the process dies by SIGSEGV)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import ctypes
        ctypes.string_at(0)  # reads address 0
        return torch.relu(x)
