"""Candidate for level1/5_ReLU that is plain PyTorch: forward calls torch.relu (hack catalogue F1).

Expected fallback classification: ``fallback`` (library share 1.0), seen by the dispatch route (one compute op,
``aten.relu``, and no own kernel). Its outputs are right (verdict correct unless fallback is rejected by policy).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
