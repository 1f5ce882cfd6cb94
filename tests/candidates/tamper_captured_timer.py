"""Candidate for level1/5_ReLU that rebinds the timer kbv's worker captured (timer._perf_counter_ns) to run slow.

Expected: verdict rejected with flag tamper (kbv.worker.timer._perf_counter_ns named).
"""
import time

import torch
import torch.nn as nn

import kbv.worker.timer as _timer

_real = time.perf_counter_ns
_timer._perf_counter_ns = lambda: _real() // 10


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
