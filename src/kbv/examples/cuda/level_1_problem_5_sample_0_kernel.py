"""Correct candidate for level1/5_ReLU on CUDA: a vectorised elementwise kernel built with load_inline.

float4 loads/stores over the 16-byte-aligned bulk, a scalar kernel for the tail (or for everything if the
pointers are misaligned), grid-stride loops, launched on the current stream. `v < 0 ? 0 : v` keeps NaN as NaN.
Inputs must be CUDA float32; they are made contiguous first.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__device__ __forceinline__ float relu1(float v) { return v < 0.f ? 0.f : v; }

__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = relu1(v.x); v.y = relu1(v.y); v.z = relu1(v.z); v.w = relu1(v.w);
        y[i] = v;
    }
}

__global__ void relu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = relu1(x[i]);
}

static int grid_for(int64_t work, int threads) {
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
    return (int)std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, max_blocks));
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_cuda: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "relu_cuda: expected float32");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) && (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        relu_vec4_kernel<<<grid_for(n4, threads), threads, 0, stream>>>(
            reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    const int64_t tail = n4 * 4;
    if (tail < n) {
        relu_scalar_kernel<<<grid_for(n - tail, threads), threads, 0, stream>>>(xp, yp, tail, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_relu_cuda",
    cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
    cuda_sources=_CUDA_SRC,
    functions=["relu_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_cuda(x)
