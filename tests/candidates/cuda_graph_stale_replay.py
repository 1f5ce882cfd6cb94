"""CUDA candidate for level1/5_ReLU that captures its work in a CUDA graph on the first call and from then on only
replays it, never loading the new input (hack catalogue T10: a replay that serves stale results).

Expected: verdict incorrect: correctness trials draw new inputs in new tensors, and every timed call reads new
contents, so the replayed output is the first call's answer.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graph = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._graph is None:
            self._static_in = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.relu(self._static_in)
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._static_out = torch.relu(self._static_in)
        self._graph.replay()
        return self._static_out
