"""KernelBench level 2, problem 1 (1_Conv2D_ReLU_BiasAdd): y = relu(conv2d(x)) + bias, bias of shape (C, 1, 1).

Partial custom kernel: the convolution stays in PyTorch (the same `self.conv` nn.Conv2d as the reference, its
own bias included, so the convolution is exactly the reference's call), and the ReLU and the per-channel bias
add run in one fused custom Triton kernel. The conv output (N, C, H, W) is viewed as N*C planes of HW = H*W
elements; a 2-D grid gives each program one plane and BLOCK elements of it, so the channel's bias is a single
scalar load per program (no per-element division): out = where(y < 0, 0, y) + bias[c]. Masked tail, 64-bit
offsets.
Numerics: a select and one add in fp32, no overflow for finite inputs; NaN stays NaN (as torch.relu).
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_bias_kernel(y_ptr, b_ptr, out_ptr, C, HW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    c = plane % C
    offs_in = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs_in < HW
    offs = plane.to(tl.int64) * HW + offs_in
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    bias = tl.load(b_ptr + c).to(tl.float32)
    out = tl.where(y < 0.0, 0.0, y) + bias
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_relu_channel_bias(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    y = y.contiguous()
    C = y.shape[-3]  # (N, C, H, W) or unbatched (C, H, W)
    if bias.numel() != C:
        raise ValueError(f"bias of {bias.numel()} elements is not one per channel ({C})")
    bias = bias.contiguous()
    out = torch.empty_like(y)
    if y.numel() == 0:
        return out
    HW = y.shape[-2] * y.shape[-1]
    planes = y.numel() // HW
    BLOCK = min(max(triton.next_power_of_2(HW), 16), 2048)
    with _on_device(y):
        _relu_bias_kernel[(planes, triton.cdiv(HW, BLOCK))](y, bias, out, C, HW, BLOCK=BLOCK,
                                                            num_warps=4 if BLOCK <= 1024 else 8)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = self.conv(x)
        return triton_relu_channel_bias(y, self.bias)
