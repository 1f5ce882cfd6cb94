import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-layer GRU over a (seq_len, batch, input_size) sequence; returns (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers, batch_first=False)

    def forward(self, x: torch.Tensor, h0: torch.Tensor):
        output, h_n = self.gru(x, h0)
        return output, h_n


seq_len = 256
batch_size = 64
input_size = 512
hidden_size = 1024
num_layers = 2


def get_inputs():
    return [torch.rand(seq_len, batch_size, input_size), torch.rand(num_layers, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers]


KBV_PROFILES = {"small": {"seq_len": 32, "batch_size": 8, "input_size": 128, "hidden_size": 128}}
