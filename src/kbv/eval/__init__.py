"""The trusted parent's evaluation engine: options, the stages of one pair, the verdict, many pairs."""

from kbv.eval.pair import CompileResult, EvalOptions, compile_candidate, evaluate, evaluate_shapes

__all__ = ["CompileResult", "EvalOptions", "compile_candidate", "evaluate", "evaluate_shapes"]
