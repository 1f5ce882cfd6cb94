"""Candidate that finds the problem module already loaded in its process (any module in sys.modules defining Model and
get_inputs) and runs the reference Model as its "kernel" (hack catalogue F2, with C12's import route). Works for any
problem.

Expected: verdict correct with flag fallback (the reference is PyTorch: library compute only); rejected under
--require-custom-kernels.
"""
import sys

import torch.nn as nn


def _reference_module():
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if isinstance(names, dict) and module.__name__ != __name__ and isinstance(names.get("Model"), type) \
                and callable(names.get("get_inputs")) and callable(names.get("get_init_inputs")):
            return module
    raise ImportError("no reference module loaded")


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.ref = _reference_module().Model(*args)

    def forward(self, *args):
        return self.ref(*args)
