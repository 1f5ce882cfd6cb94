"""Candidate for level1/5_ReLU that uses a 64 MiB scratch buffer allocated outside PyTorch (numpy) in every forward
(hack catalogue M6: memory hidden from the torch allocator).

Expected: verdict correct with flags fallback and memory_above_reference: on the CPU kbv measures the process's
resident-set high-water mark, which sees every allocation. (On CUDA the measure is torch's allocator; see
tests/candidates/cuda_hidden_workspace.py.)
"""
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = np.ones(16 * 2**20, dtype=np.float32)  # 64 MiB, every page touched
        out = torch.relu(x)
        del scratch
        return out
