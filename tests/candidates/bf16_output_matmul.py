"""Candidate for level1/1_Square_Matmul that computes the GEMM in bfloat16, output included, and casts the result back
to float32 (hack catalogue C7: precision downgrade inside an fp32 task).

Expected: verdict incorrect: rounding each output (about 32 here) to bf16's 8-bit mantissa leaves errors of about
0.1, small elementwise (inside the 1e-2 relative tolerance, which must admit TF32) but too large against the
output's spread, so the centred criterion rejects it. standard_verdict correct (KernelBench's allclose admits it), so
it is timed and the re-check after timing fails too (flag timed_output_mismatch, unless that one call is lucky).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.to(torch.bfloat16), B.to(torch.bfloat16)).to(torch.float32)
