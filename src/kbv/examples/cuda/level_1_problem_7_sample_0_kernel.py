"""Correct candidate for level1/7_Softmax (softmax over dim=1 of a (batch, dim) tensor) on CUDA, via load_inline.

One block per row, three passes over the row: max, sum of exp(x - max), then write exp(x - max) / sum.
Block reductions use warp shuffles followed by a shared-memory step across warps, so any dim works.
Accumulates in fp32 with accurate expf (no fast-math). Inputs must be CUDA float32 and 2-D; made contiguous first.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cmath>

template <bool IS_MAX>
__device__ __forceinline__ float combine(float a, float b) { return IS_MAX ? fmaxf(a, b) : a + b; }

// Reduce v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
template <bool IS_MAX>
__device__ float block_reduce(float v, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = combine<IS_MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();                      // smem may still be read from the previous reduction
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? smem[lane] : (IS_MAX ? -INFINITY : 0.f);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = combine<IS_MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) smem[0] = v;
    }
    __syncthreads();
    return smem[0];
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim) {
    __shared__ float smem[32];
    const float* xr = x + blockIdx.x * dim;
    float* yr = y + blockIdx.x * dim;

    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_reduce<true>(m, smem);

    float s = 0.f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += expf(xr[i] - m);
    s = block_reduce<false>(s, smem);

    const float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = expf(xr[i] - m) * inv;
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_cuda: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax_cuda: expected float32");
    TORCH_CHECK(x.dim() == 2, "softmax_cuda: expected a 2-D tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), dim = x.size(1);
    if (rows == 0 || dim == 0) return y;
    int threads = 32;
    while (threads < 1024 && threads < dim) threads *= 2;
    TORCH_CHECK(rows <= 0x7fffffff, "softmax_cuda: too many rows");
    softmax_rows_kernel<<<(unsigned)rows, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), dim);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_softmax_cuda",
    cpp_sources="torch::Tensor softmax_cuda(torch::Tensor x);",
    cuda_sources=_CUDA_SRC,
    functions=["softmax_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_cuda(x)
