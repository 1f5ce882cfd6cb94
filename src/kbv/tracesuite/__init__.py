"""Suites from traces: building KernelBench problems from ``kbv.trace/1`` files (``build``, ``templates``), the
evaluator-side weights and held-out shapes (``weights``), and Atrex-Bench import (``atrex``)."""
