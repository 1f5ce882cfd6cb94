"""Candidate for level1/5_ReLU that sets torch.set_default_dtype(torch.float64) at import, so the harness's input
generation in its worker (torch.rand under the trial's seed) runs in float64 (hack catalogue E1: global torch settings;
the default dtype is not in kbv's tamper snapshot).

Expected: verdict incorrect with flags fallback and timed_output_mismatch. Its correctness trials run on the inputs
the judge lends (float32, kbv.worker.lending) and pass; its timed calls draw their inputs in its own worker, in
float64, which from the same seed are different numbers: the judged timed call's output is wrong. The setting
cannot help a candidate, though kbv does not name it.
"""
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).to(torch.float32)
