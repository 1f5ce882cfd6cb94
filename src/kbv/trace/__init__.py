"""``kbv trace``: run a model eagerly and record where its time goes, per aten op and per fusable module.

``recipes`` ships plain-PyTorch models (Llama-3-8B, Mixtral-8x7B, ViT-L/16 at full width, 2 layers, and tiny
variants); ``capture`` profiles a ``Workload`` and writes the ``kbv.trace/1`` document (docs/formats.md).
"""

from kbv.trace.capture import SCHEMA, Workload, capture, materialize, materialize_call, resolve_op
from kbv.trace.recipes import RECIPES, build_workload, load_entry

__all__ = ["RECIPES", "SCHEMA", "Workload", "build_workload", "capture", "load_entry", "materialize",
           "materialize_call", "resolve_op"]
