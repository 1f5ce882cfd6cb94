"""Worker side of the agent's Nsight Compute feedback: the profiled process (``python -m kbv.worker.ncu_target
PROBLEM KERNEL``), run under ``ncu`` by ``kbv.agent.ncu``: one warm-up forward, then one forward inside the NVTX
range ``ncu`` filters on. Its results are feedback only, never a verdict."""

from __future__ import annotations

import argparse
import sys

RANGE = "kbv_profiled"  # kept equal to kbv.agent.ncu.RANGE (tests/test_agent.py checks)


def _target(argv: list[str]) -> int:
    import torch

    from kbv.worker import loading

    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("kernel")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args(argv)
    problem = loading.load_problem_module(args.problem, args.profile)
    candidate = loading.import_file(args.kernel, "kbv_candidate")
    mode = getattr(problem, "KBV_MODE", "train")
    model = loading.build_model(candidate.ModelNew, loading.init_inputs(problem), 0, "cuda", args.precision, mode)
    loading.seed_everything(1)
    dtype = loading.DTYPES[args.precision]
    inputs = [x.to("cuda", dtype=dtype if x.is_floating_point() else x.dtype) if isinstance(x, torch.Tensor) else x
              for x in problem.get_inputs()]
    model(*inputs)  # warm-up: builds, autotunes
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(_target(sys.argv[1:]))
