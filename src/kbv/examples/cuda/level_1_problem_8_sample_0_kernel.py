"""Correct candidate for level1/8_LayerNorm on CUDA, via load_inline.

One block per row (the row = the trailing normalized_shape elements). Two passes in fp32: the mean, then the
variance of (x - mean) (more robust than E[x^2] - mean^2), then y = (x - mean) * rsqrt(var + eps) * w + b.
Uses the affine weight/bias and eps of `self.ln`, the reference's own module name, so kbv copies them in.
Inputs must be CUDA float32; made contiguous first.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

// Sum v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float block_sum(float v, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();                      // smem may still be read from the previous reduction
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? smem[lane] : 0.f;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) smem[0] = v;
    }
    __syncthreads();
    return smem[0];
}

__global__ void layernorm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* __restrict__ y,
                                      int64_t n, float eps) {
    __shared__ float smem[32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;

    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, smem) / (float)n;

    float sq = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { const float d = xr[i] - mean; sq += d * d; }
    const float rstd = rsqrtf(block_sum(sq, smem) / (float)n + eps);

    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm_cuda: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                bias.scalar_type() == at::kFloat, "layernorm_cuda: expected float32");
    x = x.contiguous(); weight = weight.contiguous(); bias = bias.contiguous();
    const int64_t n = weight.numel();
    TORCH_CHECK(n > 0 && bias.numel() == n && x.numel() % n == 0, "layernorm_cuda: shape mismatch");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / n;
    if (rows == 0) return y;
    TORCH_CHECK(rows <= 0x7fffffff, "layernorm_cuda: too many rows");
    int threads = 32;
    while (threads < 1024 && threads < n) threads *= 2;
    layernorm_rows_kernel<<<(unsigned)rows, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
        n, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_layernorm_cuda",
    cpp_sources="torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);",
    cuda_sources=_CUDA_SRC,
    functions=["layernorm_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layernorm_cuda(x, self.ln.weight, self.ln.bias, self.ln.eps)
