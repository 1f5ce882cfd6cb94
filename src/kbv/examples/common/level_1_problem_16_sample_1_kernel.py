"""WRONG on purpose (instructive bad candidate) for level1/16_Sigmoid: a cubic fitted on [0, 1) only.

The cubic is the least-squares fit of sigmoid on [0, 1]: max error ~6e-5 there, so D1 (torch.rand) passes -- and
KernelBench's single allclose(atol=rtol=1e-2) check on D1 would call it correct. Outside the fitted range it drifts:
D2 (x3.0, inputs in [0, 3)) errs by up to ~0.16 and D4 (x -1.0) by ~8.5e-3, both beyond kbv's tolerance. D3 (x0.01)
fails too, on the centred check: sigmoid barely varies around 0.5 there (by ~0.0025), and the cubic's ~5e-5 error is
~7% of that variation. Expected verdict: incorrect (fails D2, D3, D4; passes D1).
The lesson: a candidate tuned to the test distribution, not to the function.
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
