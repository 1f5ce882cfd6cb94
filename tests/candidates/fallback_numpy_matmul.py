"""Candidate for level1/1_Square_Matmul that does its GEMM in numpy (its bundled BLAS) instead of PyTorch (hack
catalogue F1/F6: library fallback through a foreign library, no torch compute op and no built extension).

Expected: verdict rejected with flags background_threads and fallback. numpy's BLAS starts its own threads in the
first forward, which the parent sees as growth beyond the reference's (on the CPU its baseline is taken before the
first forward); and the parent's samples of the worker's CPU time (kbv.sandbox.sampler, every call of every stage)
fall in numpy's bundled OpenBLAS, a compute library outside torch (kbv.fallback.sampled): fallback. A gap until
2026-12-02 (library code outside torch was attributed to nothing).
"""
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.matmul(A.numpy(), B.numpy()))
