"""Reads memory it never wrote, and its answer depends on what it finds: right when its fresh buffer holds NaN (the
usual poison), wrong otherwise. The poisoned D1 trial (a second, finite poison) exposes it: uninitialized_read."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        if bool(torch.isnan(scratch).any()):
            return torch.relu(x)
        return torch.relu(x) + 1.0
