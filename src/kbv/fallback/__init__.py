"""Library-fallback detection: does the candidate's forward do its work, or does PyTorch or a vendor library?

A candidate can pass every correctness check because the "kernel" is ``torch.relu``, ``F.linear``, an ATen call
from C++, cuBLAS or cuDNN (the "correctness illusion"; hack catalogue F1-F5 and C16). Two routes gather evidence,
and ``classify`` turns it into a verdict:

**Dispatch route** (``kbv.worker.recorder.profile_call``, run in the candidate's worker on one forward). A
``TorchDispatchMode`` records every operator that reaches PyTorch's dispatcher, by overload packet
(``aten.relu``), and each is classified with the tables below. At the same time a ``sys.setprofile`` hook counts
calls into the candidate's *own* code: functions of its compiled extension modules (pybind11 functions are not
dispatcher ops, so the mode never sees them), Triton launches (``JITFunction.run``, or
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``) and operators the candidate registered itself (a
``torch.library`` op in a namespace of its own). What was found on torch 2.13 / Triton 3.9 (CPU), and relied on:

- A ``load_inline`` C++ function is invisible to the mode, but ATen calls inside it go through the dispatcher and
  are seen: a body ``return at::relu(x);`` (or ``torch::relu``) shows up as ``aten.relu``; ``torch::empty_like``
  as ``aten.empty_like``; ``x.contiguous()`` on a contiguous tensor is no op at all. The per-backend entry points
  ``at::cpu::mm`` / ``at::native::*`` bypass the dispatcher and are *invisible* (``at::cpu::mm`` dispatched
  nothing; ``at::cpu::relu`` dispatched ``aten.clamp_min``, its implementation): the symbol route covers them.
- The Triton interpreter (``TRITON_INTERPRET=1``) computes with numpy; around a launch it moves the arguments'
  storages with ``aten.empty``, ``aten.new_empty``, ``aten.set_`` and ``aten.copy_`` only (and a host-side
  ``torch.promote_types`` in the candidate shows up as ``aten.promote_types``). All of these are in the
  non-compute table, so nothing the interpreter does counts as library compute and no call-stack inspection is
  needed. (Attributing ops by the Python stack was considered and rejected: a candidate can run code whose frames
  claim to be Triton's, e.g. ``exec`` with Triton's globals, so a stack rule would be a hole, not a safeguard.)
- An operator the candidate registers (``torch.library.custom_op``) is seen as one op of its namespace, and the
  mode does not see what runs inside it (the mode is switched off while its handler runs): wrapping
  ``torch.relu`` in a custom op would hide it. So for every op outside PyTorch's own namespaces the mode
  re-enters itself and redispatches below the Python key: the aten ops inside are recorded too.

**Profiler cross-check** (``hidden_ops``, inside ``profile_call`` on the CPU). The mode stack is per thread and
the recorded code can switch it off (``torch.utils._python_dispatch._disable_current_modes()``), so the same call
also runs under a CPU ``torch.profiler`` with ``profile_all_threads``, which sees every operator reaching the
dispatcher on any thread, modes on or off (verified on torch 2.13, CPU: a helper thread's ``torch.relu`` and one
under disabled modes both show up; plain ``torch.profiler`` without ``profile_all_threads`` misses the thread).
An operator the mode handled has a ``PythonDispatchMode`` range below it; those ranges are matched against the
recorder's own counts, so a mode the candidate pushes itself does not pass for kbv's. Compute operators without a
matched range (outermost only: ``aten::relu`` hiding ``aten::clamp_min`` is one) are ``hidden_ops`` and count as
library work like the mode's. kbv's own code runs no operator inside the profiled window. On CUDA the caller's
profiler (the GPU route, which sees both by kernel) is already running and the cross-check steps aside.

**Symbol route** (``kbv.fallback.symbols.extension_symbols``, runnable from the trusted parent on the candidate's build folders). Every
shared object under the candidate's ``TORCH_EXTENSIONS_DIR`` / ``TRITON_CACHE_DIR`` (and any other object file
named) is read with ``nm -D --undefined-only -C``; the imported symbols that are library compute entry points are
reported. On this build ``at::relu(x)`` / ``torch::relu(x)`` compile to an import of
``at::_ops::relu::call(at::Tensor const&)`` and ``at::cpu::mm(a, b)`` to ``at::cpu::mm(at::Tensor const&,
at::Tensor const&)``. This sees calls that bypass the dispatcher and libraries called from C++ (cuBLAS, cuDNN,
BLAS, oneDNN); it cannot see header-only libraries compiled into the object (CUTLASS, CUB, Eigen), nor say how much
work an import does.

**Limits.** The evidence is counts, not time: one call of an own kernel weighs as much as one library GEMM (on a
GPU the profiler's per-kernel device time is the better share; see the catalogue's F1), and dummy own calls lower
the share (they can turn ``fallback`` into ``partial_fallback``, never into no flag). The dispatch route runs in
the candidate's process, so it is telemetry, not proof: a candidate can notice the mode
(``torch._C._len_torch_dispatch_stack()``) and behave differently while profiled (judge the profiled call's
outputs like a correctness trial, so at least the profiled path must be correct); library ops run with the modes
switched off or on another thread are seen by the profiler cross-check only, which the candidate could also
notice or stop (a call that stops the profiler counts as one library op; ops run under a dispatch mode of the
candidate's own are counted as hidden). The symbol route reads files and cannot be dodged from Python. Code
called through ``ctypes`` (numpy's BLAS included) and kernels generated by ``torch.compile`` are not attributed
to the candidate.

Layout: ``ops`` (operator tables, shared with the worker), ``kbv.worker.recorder`` (worker side: the recorder),
``symbols`` (parent side: imports of built binaries), ``classify`` (parent side: the verdict).
"""

from kbv.fallback.classify import FALLBACK_THRESHOLDS, classify, classify_gpu, kernel_key, own_kernel_names, share_flags
from kbv.fallback.ops import FORWARD_RANGE, PROFILER_STOPPED, is_compute, op_kind
from kbv.fallback.symbols import extension_symbols, shared_objects, symbol_library

__all__ = ["FALLBACK_THRESHOLDS", "FORWARD_RANGE", "PROFILER_STOPPED", "classify", "classify_gpu", "extension_symbols", "is_compute",
           "kernel_key", "op_kind", "own_kernel_names", "share_flags", "shared_objects", "symbol_library"]
