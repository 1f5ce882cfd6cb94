"""Candidate for level1/1_Square_Matmul that does its GEMM in numpy (its bundled BLAS) instead of PyTorch (hack
catalogue F1/F6: library fallback through a foreign library, no torch compute op and no built extension).

Expected today: verdict rejected with flag background_threads only: numpy's BLAS starts its own threads in the first
forward, which the parent sees as growth beyond the reference's (on the CPU its baseline is taken before the first
forward). Still a gap for fallback detection (F1/F6): library code outside torch and the candidate's own builds is
not attributed.
"""
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.matmul(A.numpy(), B.numpy()))
