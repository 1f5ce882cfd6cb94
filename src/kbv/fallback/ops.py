"""Operator tables for library-fallback detection, shared by the worker's recorder and the parent's
classification (pure data), and where a build folder's binaries lie (``shared_objects``)."""

from __future__ import annotations

import functools
import stat
import os
import re
from pathlib import Path
from typing import Iterable

#: Where the system's own libraries live (the C library, the C++ runtime, CUDA's driver and toolkit): binaries
#: there are not the candidate's (the worker cannot write there), for the parent's look at what a worker mapped and
#: the recorder's at what its own process did.
SYSTEM_LIBRARY_DIRS: tuple[str, ...] = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib",
                                        "/usr/local/cuda", "/usr/local/nvidia", "/opt")

# ---------------------------------------------------------------------------------------------------------------
# Operator tables (shared by both routes). Names are ATen operator names without namespace or overload
# ("relu", "add", "_softmax"). An operator not in either table counts as compute: an ambiguous op is taken to be
# library work, so a table that lags behind PyTorch errs towards reporting a fallback, never towards hiding one.
# ``op_kind`` matches the longest prefix of a name at "_" boundaries, so "add_Tensor", "relu_", "mm_out",
# "empty_memory_format" and "structured_addmm_out_cpu" find "add", "relu", "mm", "empty" and "addmm".

#: Operators that compute the problem's answer: the work a custom kernel is supposed to do. Listed for the
#: record (an op outside both tables counts as compute anyway) and for the symbol route, where an exported
#: ``at::X`` / ``at::Tensor::X`` / ``torch::X`` counts only if X is listed here (those namespaces also hold
#: threading, printing and quantizer helpers).
COMPUTE_OPS: frozenset[str] = frozenset({
    # GEMM, convolution, attention
    "mm", "matmul", "addmm", "_addmm_activation", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "linear",
    "einsum", "tensordot", "bilinear", "_scaled_mm", "_int_mm", "outer", "addr",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward",
    "slow_conv_transpose2d", "thnn_conv2d", "cudnn_convolution", "miopen_convolution",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
    # normalisation, softmax
    "_softmax", "_safe_softmax", "softmax", "_log_softmax", "log_softmax", "native_layer_norm", "layer_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "batch_norm",
    "native_group_norm", "group_norm", "instance_norm", "_fused_rms_norm", "rms_norm", "_weight_norm",
    # activations and elementwise math
    "relu", "relu6", "leaky_relu", "gelu", "silu", "mish", "elu", "selu", "celu", "glu", "hardtanh",
    "hardsigmoid", "hardswish", "softplus", "softshrink", "hardshrink", "threshold", "prelu", "_prelu_kernel",
    "sigmoid", "log_sigmoid", "log_sigmoid_forward", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
    "sqrt", "rsqrt", "reciprocal", "neg", "abs", "sign", "sgn", "clamp", "clamp_min", "clamp_max", "clip",
    "where", "maximum", "minimum", "fmax", "fmin", "erf", "erfc", "erfinv", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round", "trunc",
    "frac", "lerp", "addcmul", "addcdiv", "square", "hypot", "logit", "xlogy", "nan_to_num", "masked_fill",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite",
    # reductions and scans
    "sum", "mean", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin", "var", "std", "var_mean",
    "std_mean", "norm", "linalg_vector_norm", "linalg_norm", "frobenius_norm", "prod", "cumsum", "cumprod",
    "cummax", "cummin", "logsumexp", "logcumsumexp", "all", "any", "count_nonzero", "nansum", "nanmean",
    "median", "mode", "sort", "topk", "kthvalue",
    # pooling, losses, indexing work
    "max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool2d", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "nll_loss", "nll_loss_forward", "nll_loss2d_forward", "cross_entropy_loss", "kl_div", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "embedding", "embedding_bag", "_embedding_bag", "index_select", "gather",
    "scatter", "scatter_add", "scatter_reduce", "index_add", "index_put", "_index_put_impl", "index",
    "_unsafe_index", "take", "masked_select", "masked_scatter", "one_hot", "dropout", "native_dropout",
    "bernoulli", "tril", "triu", "upsample_nearest2d", "upsample_bilinear2d", "grid_sampler_2d",
})

#: Operators that only allocate, describe or move data: views and reshapes, transposes, allocation and fills,
#: copies and dtype/device conversion, slicing, concatenation and padding, metadata and scalar reads. Honest
#: custom kernels use these around their launches (``torch.empty_like``, ``x.contiguous()``, ``.view``), and the
#: Triton interpreter uses empty/new_empty/set_/copy_ to stage a launch's arguments.
NON_COMPUTE_OPS: frozenset[str] = frozenset({
    # allocation and fills
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "scalar_tensor", "arange", "fill", "zero", "resize", "resize_as", "_resize_output", "set",
    "lift", "lift_fresh", "lift_fresh_copy", "alias", "detach", "_has_compatible_shallow_copy_type",
    # copies and conversion
    "copy", "_copy_from", "_copy_from_and_resize", "clone", "contiguous", "to", "_to_copy", "type_as",
    "_local_scalar_dense", "item", "record_stream", "pin_memory", "_pin_memory",
    # views, reshapes, transposes, slicing
    "view", "_unsafe_view", "view_as", "view_as_real", "view_as_complex", "reshape", "_reshape_alias",
    "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "numpy_T", "mT",
    "mH", "adjoint", "movedim", "moveaxis", "swapaxes", "swapdims", "expand", "expand_as", "broadcast_to",
    "slice", "select", "narrow", "split", "split_with_sizes", "unsafe_split", "chunk", "unbind", "as_strided",
    "diagonal", "unfold", "_conj", "conj", "resolve_conj", "resolve_neg", "_neg_view",
    # assembling outputs (data movement, no arithmetic)
    "cat", "concat", "concatenate", "stack", "constant_pad_nd",
    # metadata
    "promote_types", "result_type", "can_cast", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "size", "stride", "dim", "is_same_size", "is_contiguous", "is_nonzero", "_nested_tensor_size",
})

#: Operator namespaces that are PyTorch's own libraries: an op from one of them is library work (classified with
#: the tables). An op from any other namespace was registered by the candidate (``torch.library``): a call of its
#: own code, whose inside the mode re-enters to record.
LIBRARY_NAMESPACES: frozenset[str] = frozenset({
    "aten", "prims", "quantized", "_quantized", "quantized_decomposed", "mkldnn", "mkl", "onednn", "fbgemm",
    "xnnpack", "_c10d_functional", "c10d", "c10d_functional", "_dtensor", "inductor", "profiler", "debugprims",
    "torchvision", "torchaudio", "torchao", "_test",
})


@functools.lru_cache(maxsize=4096)
def op_kind(name: str) -> str:
    """``"compute"``, ``"non_compute"`` or ``"unknown"`` for an operator name ("aten.relu", "aten::add_Tensor",
    "relu_", "mm_out_cpu"). ``unknown`` is counted as compute by callers of the dispatch route."""
    parts = [p for p in re.split(r"::|\.", name) if p]
    # "aten.relu.default" / "aten::add_Tensor" -> the op's name; a bare name ("relu_") stays as it is
    bare = parts[1] if len(parts) >= 2 else (parts[0] if parts else "")
    for prefix in ("structured_", "ufunc_"):
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
    parts = bare.split("_")
    for end in range(len(parts), 0, -1):
        stem = "_".join(parts[:end])
        for cand in (stem, stem.rstrip("_")):
            if cand in NON_COMPUTE_OPS:
                return "non_compute"
            if cand in COMPUTE_OPS:
                return "compute"
    return "unknown"


def is_compute(name: str) -> bool:
    """The dispatch route's rule: compute, or unknown (ambiguous counts as library)."""
    return op_kind(name) != "non_compute"



#: ``hidden_ops``' entry for a call that stopped the profiler (one library unit: what it hid cannot be known).
PROFILER_STOPPED = "<profiler stopped by the call>"
# ---------------------------------------------------------------------------------------------------------------
# The GPU route: every kernel of one profiled forward, by device time.
#
# ``torch.profiler`` links each device kernel to the innermost frontend event active on the launching thread
# (``FunctionEvent.kernels``): a kernel launched while an ATen op runs (cuBLAS inside ``aten::mm``, also when a C++
# extension calls ``at::mm``) belongs to that op; one launched from a pybind11 function or a Triton launcher belongs
# to the surrounding ``record_function`` range, or to nothing. A kernel is the candidate's only when no ATen op
# launched it *and* its name is defined in the candidate's own binaries or is a Triton kernel compiled into the
# candidate's own cache; Inductor's generated kernels (``triton_*``) and anything else count as library. Kernels of
# non-compute ATen ops (copies, fills, allocation) and memcpy/memset are data movement, left out of the share.

FORWARD_RANGE = "kbv_candidate_forward"
_DATA_MOVEMENT = ("Memcpy", "Memset", "memcpy", "memset")




def _is_elf(path: Path) -> bool:
    """A regular file that starts with ELF's magic (never opens a FIFO or device a worker might name)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def shared_objects(build_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every ELF shared object (``*.so``, ``*.so.*``) under the given folder(s), real paths, sorted."""
    roots = [build_root] if isinstance(build_root, (str, os.PathLike)) else list(build_root)
    found: set[str] = set()
    for root in roots:
        root = Path(root)
        if root.is_file():
            candidates: Iterable[Path] = [root]
        elif root.is_dir():
            candidates = (p for p in root.rglob("*") if p.name.endswith(".so") or ".so." in p.name)
        else:
            continue
        for p in candidates:
            if p.is_file() and _is_elf(p):
                found.add(os.path.realpath(p))
    return sorted(found)


