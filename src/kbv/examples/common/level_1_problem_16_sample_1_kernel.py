"""WRONG on purpose (instructive bad candidate) for level1/16_Sigmoid: a cubic fitted on [0, 1) only.

The cubic is the least-squares fit of sigmoid on [0, 1]: max error ~6e-5 there, so D1 (torch.rand) and D3 (x0.01)
pass. Outside the fitted range it drifts: on D2 (x3.0, inputs in [0, 3)) the error reaches ~0.16, and on D4
(x -1.0, inputs in (-1, 0]) ~8.5e-3 (caught only by tolerances tighter than ~1e-2). Expected verdict: incorrect
(caught by D2). The lesson: a candidate tuned to the test distribution, not to the function.
"""
import torch
import torch.nn as nn

# np.polyfit(x, sigmoid(x), 3) on 20001 points of [0, 1]; highest power first
_C3, _C2, _C1, _C0 = -0.01574933, -0.00424265, 0.25104181, 0.49994515


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((_C3 * x + _C2) * x + _C1) * x + _C0  # Horner
