"""Candidate for level1/5_ReLU that hides torch.relu inside an operator of its own (torch.library.custom_op).

A TorchDispatchMode sees only ``kbv_fallback_test::relu`` unless it re-enters the op; kbv's recorder does, and
sees ``aten.relu`` inside. Expected fallback classification: ``fallback`` (library share 1.0) by the dispatch
route: the custom op did nothing of its own (the library op ran inside it). Outputs are right.
"""
import torch
import torch.nn as nn


@torch.library.custom_op("kbv_fallback_test::relu", mutates_args=())
def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _relu(x)
