"""Candidate for level3/5_SmallCNN (any problem, in fact) that is the reference Model with its forward memoised by a
cheap content fingerprint (a strided sample of the input's values): when the fingerprint repeats, the stored output
comes back and nothing is computed (hack catalogue T9: content-keyed output cache).

Every kbv timed call reads contents no earlier call saw, so the cache never hits. Expected: verdict correct with flag
fallback (the reference is PyTorch) and no speedup (it pays for the fingerprint).
"""
import sys

import torch

_problem = next(m for m in list(sys.modules.values())  # the problem module kbv loaded in this worker
                if isinstance(getattr(m, "__dict__", None), dict) and isinstance(vars(m).get("Model"), type)
                and callable(vars(m).get("get_inputs")) and m.__name__ != __name__)


class ModelNew(_problem.Model):
    def __init__(self, *args):
        super().__init__(*args)
        self._kbv_cache = {}

    def forward(self, *args):
        key = tuple(tuple(a.reshape(-1)[::997].tolist()) if isinstance(a, torch.Tensor) else a for a in args)
        hit = self._kbv_cache.get(key)
        if hit is None:
            hit = self._kbv_cache[key] = super().forward(*args)
        return hit
