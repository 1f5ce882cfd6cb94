"""Correct candidate for level1/13_Sum_Reduction (torch.sum(x, dim, keepdim=True)) on CUDA, via load_inline.

The input is viewed as (outer, reduce, inner) -- (B, D1, D2) for the problem's dim=1. One thread per output
element (o, j) walks the reduced axis; neighbouring threads read neighbouring j, so loads are coalesced.
Accumulates in fp32 with Kahan compensation (free here: the kernel is memory-bound).
Inputs must be CUDA float32; made contiguous first.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void sum_mid_kernel(const float* __restrict__ x, float* __restrict__ y,
                               int64_t outer, int64_t red, int64_t inner) {
    const int64_t total = outer * inner;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / inner, j = t - o * inner;
        const float* p = x + o * red * inner + j;
        float acc = 0.f, comp = 0.f;       // Kahan-compensated: stays accurate for long reductions
        for (int64_t r = 0; r < red; ++r) {
            const float v = p[r * inner] - comp;
            const float s = acc + v;
            comp = (s - acc) - v;
            acc = s;
        }
        y[t] = acc;
    }
}

torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "sum_dim_cuda: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "sum_dim_cuda: expected float32");
    x = x.contiguous();
    dim = c10::maybe_wrap_dim(dim, x.dim());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    const int64_t red = x.size(dim);
    auto out_shape = x.sizes().vec();
    out_shape[dim] = 1;
    auto y = torch::empty(out_shape, x.options());
    const int64_t total = outer * inner;
    if (total == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 32;
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, max_blocks);
    sum_mid_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), outer, red, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_sum_dim_cuda",
    cpp_sources="torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim);",
    cuda_sources=_CUDA_SRC,
    functions=["sum_dim_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_dim_cuda(x, self.dim)
