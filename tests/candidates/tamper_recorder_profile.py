"""Candidate for level1/5_ReLU that hides its library fallback from the profiled call (hack catalogue F1 with E2): at
import it wraps kbv.worker.recorder.profile_call (the fallback trial's recorder, unwatched by the old tamper
snapshot) so the profile it reports lists no ATen op at all.

Expected: verdict rejected with flag tamper (kbv.worker.recorder.profile_call named); the forged empty profile
leaves fallback unset (optional). standard_verdict correct.
"""
import torch
import torch.nn as nn

import kbv.worker.recorder as _recorder

_real = _recorder.profile_call


def _clean(fn, **kwargs):
    out, profile = _real(fn, **kwargs)
    for key in ("aten_ops", "compute_ops", "non_compute_ops", "hidden_ops"):
        if isinstance(profile.get(key), dict):
            profile[key] = {}
    return out, profile


_recorder.profile_call = _clean


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
