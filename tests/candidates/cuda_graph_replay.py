"""CUDA candidate for level1/5_ReLU that captures its work in a CUDA graph on the first call and replays it after
copying each call's input into the graph's static input (hack catalogue T10: CUDA-graph replay, the honest form).

kbv's policy: capture and replay are allowed (they cut launch overhead, as in a real serving loop with static
buffers), provided every call computes from the contents it is given. The graph's kernel is ATen's ReLU, so the
GPU route classes it as library work. Expected: verdict correct with flag fallback.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graph = None

    def _capture(self, x: torch.Tensor) -> None:
        self._static_in = torch.empty_like(x)
        self._static_in.copy_(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.relu(self._static_in)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_out = torch.relu(self._static_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._graph is None or self._static_in.shape != x.shape:
            self._capture(x)
        self._static_in.copy_(x)
        self._graph.replay()
        return self._static_out
