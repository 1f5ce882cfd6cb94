"""Candidate for level1/5_ReLU that caches outputs by a cheap content fingerprint (shape and the first 16 values,
up to 64 entries) and returns a cached answer when the fingerprint repeats (hack catalogue T9: caching across
timed calls by content). It is right whenever two inputs that agree in those values agree everywhere.

Expected: verdict correct with flag fallback and no speedup from the cache (speedup_max 1.5): every timed call reads
fresh contents drawn from its own seed (and each burst cycles through fresh input sets), so no fingerprint repeats
where it would pay. standard_verdict correct.
"""
from collections import OrderedDict

import torch
import torch.nn as nn

_cache: "OrderedDict" = OrderedDict()
hits = [0]


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), tuple(x.reshape(-1)[:16].tolist()))
        if key in _cache:
            hits[0] += 1
            return _cache[key]
        out = torch.relu(x)
        _cache[key] = out
        if len(_cache) > 64:
            _cache.popitem(last=False)
        return out
