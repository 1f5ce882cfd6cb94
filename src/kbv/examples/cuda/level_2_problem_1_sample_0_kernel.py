"""Correct candidate for level2/1_Gemm_Bias_ReLU on CUDA -- an example of a PARTIAL FALLBACK.

The GEMM itself is not custom: it runs in cuBLAS through torch.matmul. Only the epilogue is a custom kernel:
bias add + ReLU fused into one in-place pass over the GEMM output (instead of two elementwise kernels).
Keeps the reference's `self.gemm` (Linear, no bias) and `self.bias`, so kbv copies the weights in.
Inputs must be CUDA float32.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = y[i] + bias[i % n];
        y[i] = v < 0.f ? 0.f : v;
    }
}

// In place: y[m, j] = relu(y[m, j] + bias[j]) for a contiguous (M, N) y.
torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "bias_relu_: expected CUDA tensors");
    TORCH_CHECK(y.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat, "bias_relu_: expected float32");
    TORCH_CHECK(y.is_contiguous(), "bias_relu_: output must be contiguous");
    bias = bias.contiguous();
    const int64_t n = bias.numel(), total = y.numel();
    TORCH_CHECK(y.dim() >= 1 && y.size(-1) == n, "bias_relu_: bias size must match the last dimension");
    if (total == 0) return y;
    const int threads = 256;
    const int64_t max_blocks = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, max_blocks);
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), total, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kbv_example_gemm_bias_relu_cuda",
    cpp_sources="torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias);",
    cuda_sources=_CUDA_SRC,
    functions=["bias_relu_"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x.contiguous(), self.gemm.weight.t()).contiguous()  # cuBLAS: the fallback part
        return _ext.bias_relu_(y, self.bias)
