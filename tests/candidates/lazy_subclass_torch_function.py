"""Candidate for level1/5_ReLU that returns an empty torch.Tensor subclass whose __torch_function__ computes the real
answer only when something touches it (hack catalogue T3, the lazy-subclass form: the work happens outside the timed
call, when the checker reads the output).

Expected: verdict incorrect and standard_verdict incorrect, no flags: kbv's verified check demands exactly
torch.Tensor, and its standard check also reads the raw data the worker copied out (never the subclass itself), so
nothing is realised; KernelBench's in-process torch.allclose would have called __torch_function__ and passed.
"""
import torch
import torch.nn as nn


class LazyReLU(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}

        def realise(a):
            if isinstance(a, LazyReLU):
                with torch._C.DisableTorchFunctionSubclass():
                    return torch.relu(a._kbv_source)
            return a

        args = tuple(realise(a) for a in args)
        kwargs = {k: realise(v) for k, v in kwargs.items()}
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x).as_subclass(LazyReLU)
        out._kbv_source = x
        return out
