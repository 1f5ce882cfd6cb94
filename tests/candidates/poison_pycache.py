"""Adversarial fixture (issue 11, E3): writes a poisoned ``__pycache__`` entry for its problem file (a reference
``Model`` that returns zeros, stamped with the source's own mtime and size so the import system would accept it),
then answers ReLU itself. ``tests/test_sandbox_escape.py`` appends ``TARGETS`` (the problem's path, in a folder the
candidate may write) and then evaluates an honest candidate: a reference loaded through that cache would return
zeros and fail the honest run; a reference compiled from the bytes the parent hashed does not."""

import importlib._bootstrap_external as bootstrap
import importlib.util
import os

import torch
import torch.nn as nn

TARGETS = {"problem": ""}


def poison(path):
    st = os.stat(path)
    with open(path) as f:
        source = f.read().replace("return torch.relu(x)", "return torch.zeros_like(x)")
    data = bootstrap._code_to_timestamp_pyc(compile(source, path, "exec"), int(st.st_mtime), st.st_size)
    pyc = importlib.util.cache_from_source(path)
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, "wb") as f:
        f.write(data)
    return pyc


class ModelNew(nn.Module):
    def forward(self, x):
        try:
            poison(TARGETS["problem"])
        except OSError:
            pass
        return torch.relu(x)
