"""Candidate for level1/1_Square_Matmul whose C++ "kernel" calls ATen's CPU GEMM directly: at::cpu::mm(A, B).

at::cpu::mm is the per-backend entry point: it runs the CPU kernel without going through the dispatcher, so a
TorchDispatchMode sees no operator at all. Expected fallback classification: ``fallback`` (library share 1.0),
caught by the symbol route only (the extension imports ``at::cpu::mm``; the dispatch route records no compute op).
Outputs are right. Builds a C++ (CPU) extension.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/ops/mm_cpu_dispatch.h>

torch::Tensor matmul_fwd(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "matmul_fwd: expected CPU tensors");
    return at::cpu::mm(a, b);
}
"""

_ext = load_inline(
    name="kbv_test_fallback_cpu_mm",
    cpp_sources=_CPP_SRC,
    functions=["matmul_fwd"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _ext.matmul_fwd(A, B)
