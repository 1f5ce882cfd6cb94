"""Bad candidate for level1/5_ReLU on CUDA: its kernel writes far out of bounds (an illegal memory access).

Expected verdict: runtime_error. CUDA errors are sticky, so the worker that ran it is finished; kbv must record the
failure and carry on with the next pair in a fresh process.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void wild_write(float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i + (int64_t(1) << 40)] = 1.0f;  // ~4 TB past the buffer
}

torch::Tensor relu_wild(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    wild_write<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    return y;
}
"""

_ext = load_inline(name="kbv_test_illegal_access", cpp_sources="torch::Tensor relu_wild(torch::Tensor x);",
                   cuda_sources=_CUDA_SRC, functions=["relu_wild"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_wild(x)
