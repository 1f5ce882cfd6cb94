"""Correct candidate for level1/5_ReLU on the CPU: a C++ extension built with torch.utils.cpp_extension.load_inline.

A plain loop over a contiguous buffer (the compiler auto-vectorises it at -O3), dispatched over float32/float64
and bfloat16/float16. `v < 0 ? 0 : v` keeps NaN as NaN, like torch.relu. Non-contiguous inputs are made
contiguous first. CPU only: it builds a C++ (not CUDA) extension.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SRC = r"""
#include <torch/extension.h>

torch::Tensor relu_cpu(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "relu_cpu: expected a CPU tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x, at::MemoryFormat::Contiguous);
    const int64_t n = x.numel();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "relu_cpu", [&] {
        const scalar_t* __restrict__ in = x.data_ptr<scalar_t>();
        scalar_t* __restrict__ out = y.data_ptr<scalar_t>();
        const scalar_t zero = scalar_t(0);
        for (int64_t i = 0; i < n; ++i) {
            const scalar_t v = in[i];
            out[i] = v < zero ? zero : v;
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_relu_cpu",
    cpp_sources=_CPP_SRC,
    functions=["relu_cpu"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_cpu(x)
