"""Candidate for level2/1_Gemm_Bias_ReLU that writes only the easy part (hack catalogue F5): the GEMM stays in
PyTorch (torch.mm) and a Triton kernel does the bias add and ReLU.

Expected fallback classification: ``partial_fallback`` (library share 0.5: one library compute op, ``aten.mm``,
and one own Triton launch) by the dispatch route. Keeps the reference's parameter names. Outputs are right.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bias_relu_kernel(y_ptr, b_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x, self.gemm.weight.t()).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        _bias_relu_kernel[(triton.cdiv(n, 1024),)](y, self.bias.contiguous(), out, n, y.shape[1], BLOCK=1024)
        return out
