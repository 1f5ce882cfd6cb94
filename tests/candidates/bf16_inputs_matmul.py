"""Candidate for level1/1_Square_Matmul that rounds its inputs to bfloat16 and accumulates in float32, as a bf16
tensor-core GEMM does (hack catalogue C7: precision downgrade inside an fp32 task; on a GPU it would run several
times faster than an fp32 GEMM).

Expected: verdict correct with flags fallback and low_precision where the input rounding stays inside the fp32
tolerance (which must admit TF32: 8x finer), or incorrect where it does not: on one-signed inputs (D1-D4) the errors
average out in the sums, on mixed-sign ones (D5, D6) the sums cancel and the largest error is about at the
tolerance's edge. Against a float64 run of the reference its error is more than a thousand times the verified
baseline's own (low_precision; rejected only under --strict-precision).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.to(torch.bfloat16).to(torch.float32), B.to(torch.bfloat16).to(torch.float32))
