"""Bad candidate for level1/5_ReLU -- expected verdict: compile_error (C++ extension fails to build; CPU, load_inline)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SRC = r"""
#include <torch/extension.h>

torch::Tensor relu_cpu(torch::Tensor x) {
    int not_a_tensor = x;  // deliberate type error: a Tensor is not an int
    return torch::relu(x);
}
"""

_ext = load_inline(name="kbv_test_build_error", cpp_sources=_CPP_SRC, functions=["relu_cpu"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_cpu(x)
