"""Candidate for level1/5_ReLU whose C++ "kernel" is a call to ATen: the load_inline body returns at::relu(x).

Expected fallback classification: ``fallback`` (library share 1.0), seen by both routes: the dispatch route sees
``aten.relu`` (at::relu goes through the dispatcher, inside the extension call), and the symbol route finds the
extension importing ``at::_ops::relu::call``. Outputs are right. Builds a C++ (CPU) extension.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP_SRC = r"""
#include <torch/extension.h>

torch::Tensor relu_fwd(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "relu_fwd: expected a CPU tensor");
    return at::relu(x);
}
"""

_ext = load_inline(
    name="kbv_test_fallback_at_relu",
    cpp_sources=_CPP_SRC,
    functions=["relu_fwd"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_fwd(x)
