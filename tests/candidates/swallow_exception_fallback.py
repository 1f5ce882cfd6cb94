"""Candidate for level1/5_ReLU whose "custom kernel" fails on every input and whose forward silently falls back to
PyTorch (hack catalogue C16: exception-swallowing fallback): try: own kernel, except: torch.relu.

Expected: verdict correct with flag fallback: the profiled trial shows library compute (aten.relu) and no launch of
the candidate's own.
"""
import torch
import torch.nn as nn


def _custom_relu(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("kernel launch failed: too many resources requested")  # what a broken launch reports


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return _custom_relu(x)
        except Exception:
            return torch.relu(x)
