"""``kbv trace``: capture a ``kbv.trace/1`` file from a shipped recipe or a ``module:function`` entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from kbv.cli.console import make_console
from kbv.cli.checks import UserError, resolved_device
from rich.markup import escape

from kbv.report.text import print_table

# as wide as the terminal, or COLUMNS; piped without COLUMNS, wide enough for its tables
TOP = 10  # rows per table in the summary


def _shapes(specs: list[dict[str, Any]]) -> str:
    return " ".join("x".join(map(str, s["shape"])) or "()" for s in specs) + (
        f" {specs[0]['dtype']}" if specs else "")


def print_summary(trace: dict[str, Any], out: Console, top: int = TOP) -> None:
    """The top ops and modules of each phase by attributed time (tables as wide as ``out``: none cuts a number)."""
    unit = "device" if trace["time_source"] == "device" else "CPU (estimate)"
    numbers = ("calls", "ms", "share")
    for phase, data in trace["phases"].items():
        total, label = data["total_us"] or 1.0, escape(f"{trace['recipe']} [{phase}]")
        rows = [[escape(f"{op['op']}.{op['overload'] or '?'}"), _shapes(op["inputs"]), str(op["calls"]),
                 f"{op['time_us'] / 1e3:.3f}", f"{op['time_us'] / total:.1%}",
                 "yes" if op["args"] is not None else "none"] for op in data["ops"][:top]]
        print_table(out, f"{label} ops: {data['total_us'] / 1e3:.2f} ms {unit} over {data['steps']} step(s), "
                         f"{len(data['ops'])} signatures", ["op", "inputs", *numbers, "args"], rows, keep=1,
                    right=numbers)
        rows = [[m["kind"], escape(", ".join(f"{k}={v}" for k, v in m["params"].items())), _shapes(m["inputs"]),
                 escape(", ".join(f"{k}={v}" for k, v in m["extra_args"].items()) or "-"), str(m["calls"]),
                 f"{m['time_us'] / 1e3:.3f}", f"{m['time_us'] / total:.1%}"] for m in data["modules"][:top]]
        print_table(out, f"{label} modules (nested modules each count their time)",
                    ["kind", "params", "inputs", "extra", *numbers], rows, keep=1, right=numbers)


@click.command("trace")
@click.argument("target", required=False)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Where to write the trace (JSON).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where to run the model while tracing: auto, cpu or cuda.")
@click.option("--size", type=click.Choice(["full", "tiny"]), default="full", show_default=True,
              help="full: the real widths (2 layers); tiny: the same code at toy sizes (CPU tests).")
@click.option("--prefill-tokens", type=int, default=None, help="LLM prompt length (default 2048; tiny 16).")
@click.option("--steps-decode", type=int, default=None, help="LLM decode steps (default 16; tiny 3).")
@click.option("--batch", type=int, default=None, help="LLM decode batch (default 8) or ViT images (default 32).")
@click.option("--list", "list_", is_flag=True, help="List the shipped recipes and exit.")
def trace_cmd(target, out, device, size, prefill_tokens, steps_decode, batch, list_) -> None:
    """Profile TARGET (a recipe name or module:function) eagerly and write where its time goes, per phase.

    Per aten op call signature (exact args) and per fusable module (rmsnorm, rotary, attention, gated_mlp, moe,
    layernorm, mlp): calls and time (kernel time on CUDA, CPU self time on the CPU). Format: docs/formats.md.
    """
    from kbv.trace import build_workload, capture
    from kbv.trace.recipes import LM_DEFAULTS, RECIPES, VIT_DEFAULTS

    if list_:
        for name, fn in RECIPES.items():
            defaults = VIT_DEFAULTS if name.startswith("vit") else LM_DEFAULTS
            make_console().print(f"[bold]{name}[/]: {(fn.__doc__ or '').strip()}\n    full {defaults['full']}; "
                          f"tiny {defaults['tiny']}", highlight=False)
        return
    if not target or not out:
        raise click.UsageError("give a recipe (or module:function) and --out, or --list")
    resolved = resolved_device(device)
    overrides = {"prefill_tokens": prefill_tokens, "decode_steps": steps_decode, "batch": batch}
    try:
        workload = build_workload(target, resolved, size, **overrides)
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        raise UserError(f"{target}: {type(exc).__name__}: {exc}") from None
    make_console().print(f"kbv trace: {target} ({size}) on {resolved}: {len(workload.steps)} steps")
    trace = capture(workload, target, size, resolved)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trace, indent=1, allow_nan=False, default=str) + "\n")
    print_summary(trace, make_console())
    make_console().print(f"trace -> {out}")
