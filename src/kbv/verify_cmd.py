"""``kbv verify RESULTS.jsonl``: check every record's MAC chain (kbv.attest), and the record reader ``kbv report``
uses to warn on records that fail it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from kbv import attest


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


def verified_records(path: str | Path, warn: Callable[[str], None] = _echo_err) -> Iterator[dict[str, Any]]:
    """The records of a results file, as :func:`kbv.records.read_records` gives them, each with
    ``authenticated``: ``"verified"``, ``"unauthenticated"`` (imported from KernelBench or Atrex, or without auth),
    the failure (``"edited"``, ``"forged"``, ...), or ``"unverified"`` (no key here). ``warn`` gets one line per
    record that fails verification, and per record without auth in a file that has authenticated ones."""
    path = Path(path)
    try:
        status = attest.verify_file(path)
    except attest.AttestError as exc:
        warn(f"kbv: {path}: records not verified: {exc}")
        status = None
    kinds = status.status_of() if status else {}
    if status:
        signed = status.records > len(status.unauthenticated)  # the file has authenticated records
        for f in status.findings:
            if f.failed or (f.kind == "unauthenticated" and signed):  # a bare line among signed ones is suspect
                warn(f"kbv: {path}:{f.line}: {f.kind}: {f.message}" if f.line else
                     f"kbv: {path}: {f.kind}: {f.message}")
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if not (isinstance(data, dict) and str(data.get("schema", "")).startswith("kbv.result/")):
                continue
            kind = kinds.get(number)
            if status is None:
                data["authenticated"] = "unverified"
            else:
                data["authenticated"] = ("verified" if kind is None else
                                         "unauthenticated" if kind in ("imported", "unauthenticated") else kind)
            yield data


@click.command("verify")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The record key the results were written with (default: $KBV_RECORD_KEY_FILE or "
                   "~/.config/kbv/record.key).")
@click.option("--allow-unauthenticated", is_flag=True,
              help="Exit 0 when the only records that do not verify are unauthenticated (imported) ones.")
def verify_cmd(results: tuple[Path, ...], key_file: Path | None, allow_unauthenticated: bool) -> None:
    """Check the MAC chain of results files: report edited, forged, inserted, deleted and reordered records and
    the unauthenticated (imported) ones. Exit 0 when every record verifies, 1 when any does not, 2 on a user
    error (no key, unreadable key, a file with no records)."""
    failed = False
    for path in results:
        try:
            key = attest.load_key(key_file, create=False) if key_file else None
            result = attest.verify_file(path, key=key, key_file=key_file)
        except attest.AttestError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
        except OSError as exc:
            click.echo(f"Error: cannot read {path}: {exc.strerror}", err=True)
            sys.exit(2)
        for f in result.findings:
            click.echo(f"{path}:{f.line}: {f.kind}: {f.message}" if f.line else f"{path}: {f.kind}: {f.message}")
        bad = len(result.failures)
        unauth = len(result.unauthenticated)
        click.echo(f"{path}: {result.records} records, {result.verified} verified, {bad} failed, "
                   f"{unauth} unauthenticated")
        failed |= bool(bad) or (bool(unauth) and not allow_unauthenticated)
        if not result.records and not result.findings:
            click.echo(f"Error: {path} holds no records: nothing was verified", err=True)
            sys.exit(2)
    sys.exit(1 if failed else 0)
