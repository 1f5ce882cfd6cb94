"""Candidate for level1/5_ReLU that takes more CPU than the reference (hack catalogue T2): in every forward it widens
the CPU affinity of each of its threads to every CPU of the machine (kbv's parent pins both roles' workers to the
same CPUs) and asks torch for two threads, so ATen's ReLU can run on a second core.

Expected: verdict rejected with flags resources_changed (the parent reads each worker thread's allowed CPUs from
/proc after every call) and fallback. standard_verdict correct. Under load (the whole corpus at once on 2 cores)
its threads on the parent's CPU can also lengthen the windows around its timed calls: untimed_work may appear; and
the second thread it asks torch for (an OpenMP worker, which spin-waits after a parallel region) can use CPU while
the reference is timed: idle_work may appear (1 of 2 clean-clone CI runs of h100-2026-12-05-c's tree).
"""
import os

import torch
import torch.nn as nn


def _widen() -> None:
    every = set(range(os.cpu_count() or 1))
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), every)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _widen()
        if torch.get_num_threads() < 2:
            torch.set_num_threads(2)
        return torch.relu(x)
