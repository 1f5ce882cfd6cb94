"""Correct candidate for the built-in level2/1_Gemm_Bias_ReLU in Triton, GEMM included: no library fallback.

y = relu(x @ W^T + b) in one kernel: each program computes a BLOCK_M x BLOCK_N tile of y, accumulating
x[m, k] * W[n, k] over K in fp32 with `tl.dot` (TF32 on the GPU, the verified baseline's own matmul precision),
then adds the bias and applies ReLU before the one store. Partial tiles are masked. Keeps the reference's
`self.gemm` (Linear, no bias) and `self.bias`, so kbv copies the weights in. Used by the agent's replay on a GPU
(scripts/agent_replay.py) as the kernel that converts a library fallback.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm_bias_relu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                    stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0)
        acc += tl.dot(a, w)
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
    acc = acc + bias[None, :]
    acc = tl.where(acc < 0.0, 0.0, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.gemm.weight
        m, k = x.shape
        n = w.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=torch.float32)
        block_m, block_n, block_k = 64, 64, 32
        grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
        _gemm_bias_relu[grid](x, w, self.bias, y, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                              y.stride(0), y.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
        return y.to(x.dtype)
