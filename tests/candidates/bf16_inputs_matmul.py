"""Candidate for level1/1_Square_Matmul that rounds its inputs to bfloat16 and accumulates in float32, as a bf16
tensor-core GEMM does (hack catalogue C7: precision downgrade inside an fp32 task; on a GPU it would run several
times faster than an fp32 GEMM).

Expected: verdict correct with flags fallback and low_precision: the input rounding averages out in the sums and
stays inside the fp32 tolerance (which must admit TF32), but against a float64 run of the reference its error is
more than a thousand times the verified baseline's own (rejected only under --strict-precision).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.to(torch.bfloat16).to(torch.float32), B.to(torch.bfloat16).to(torch.float32))
