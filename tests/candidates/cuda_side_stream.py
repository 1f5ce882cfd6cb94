"""CUDA candidate for level1/5_ReLU that launches its work on a side stream and returns without waiting for it (hack
catalogue T1: side-stream injection). Events recorded on the default stream would complete before the work does, so a
timer without a device-wide synchronize sees only the launch. The output is right once the device is synchronised.

Expected: verdict correct with flag fallback (torch ops), and a speedup near 1 (not the ~20x an unsynchronised timer
reports): kbv's timer synchronises the whole device before its end event.
"""
import torch
import torch.nn as nn

_side = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        out = torch.empty_like(x)
        _side.wait_stream(torch.cuda.current_stream())  # the inputs are ready
        with torch.cuda.stream(_side):
            torch.clamp(x, min=0.0, out=out)
        return out  # no wait on _side, no record_stream: the work is still running
