"""CUDA candidate for level1/1_Square_Matmul whose load_inline extension is a thin wrapper around cuBLAS: the C++
function calls cublasSgemm on ATen's handle and stream (hack catalogue F1: library fallback inside a "custom" CUDA
extension). No ATen compute op is dispatched (torch::empty only), so the dispatch route sees nothing; the extension's
object imports cublasSgemm_v2, which the symbol route reads from the build folder.

Built as C++ with CUDA headers and libraries (with_cuda=True, no nvcc), so the object has no device code of its own.
Expected: verdict correct with flag fallback (library share 1).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

torch::Tensor matmul_cublas(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul_cublas: expected CUDA tensors");
    TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "matmul_cublas: expected float32");
    a = a.contiguous();
    b = b.contiguous();
    const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
    auto c = torch::empty({m, n}, a.options());
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // bound to the current stream
    const float alpha = 1.0f, beta = 0.0f;
    // row-major C = A B is column-major C^T = B^T A^T
    TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.data_ptr<float>(), n,
                            a.data_ptr<float>(), k, &beta, c.data_ptr<float>(), n) == CUBLAS_STATUS_SUCCESS,
                "matmul_cublas: cublasSgemm failed");
    return c;
}
"""

_ext = load_inline(name="kbv_test_cuda_cublas", cpp_sources=_CPP_SRC, functions=["matmul_cublas"],
                   with_cuda=True, verbose=False)


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _ext.matmul_cublas(A, B)
