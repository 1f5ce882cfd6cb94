"""Throughput of kbv.wire's receiver: the frame reader that reads straight into the tensor (os.readv on the
connection's descriptor) against the previous one (Connection.recv_bytes_into, which copies each frame through a
BytesIO). A sender process writes float32 tensors over a real duplex multiprocessing pipe, as a worker does.

    python benchmarks/wire_bench.py [--mib 256] [--reps 5]

Prints GB/s (10^9 bytes per second) per reader: the median over the repetitions, and the best.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

import torch

from kbv import wire


def old_recv(conn: Connection) -> Any:
    """kbv.wire.recv before the bounded reader: recv_bytes, then recv_bytes_into each tensor frame."""
    body, specs = wire._parse_header(conn.recv_bytes(wire.MAX_HEADER_BYTES))
    tensors = []
    for dtype, shape, nbytes in specs:
        t = torch.empty(shape, dtype=dtype)
        if nbytes:
            got = conn.recv_bytes_into(wire._bytes_view(t))
            if got != nbytes:
                raise wire.WireError("size")
        tensors.append(t)
    return tensors[body["__tensor__"]]


def sender(conn: Connection, nbytes: int, count: int) -> None:
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    header, tensors = wire.split(t)
    for _ in range(count):
        wire.send_parts(conn, header, tensors)
    conn.recv_bytes()  # wait for the receiver before closing


def measure(reader: str, nbytes: int, reps: int) -> list[float]:
    a, b = multiprocessing.Pipe(duplex=True)
    proc = multiprocessing.get_context("fork").Process(target=sender, args=(b, nbytes, reps + 1), daemon=True)
    proc.start()
    b.close()
    recv = old_recv if reader == "old" else (lambda c: wire.recv(c))
    recv(a)  # warm-up: page faults of the first allocation, process start
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        t = recv(a)
        dt = time.perf_counter() - t0
        assert t.numel() * 4 == nbytes and float(t[-1]) == 1.0
        rates.append(nbytes / dt / 1e9)
        del t
    a.send_bytes(b"done")
    proc.join(10)
    a.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="tensor size in MiB (default 256)")
    parser.add_argument("--reps", type=int, default=5, help="messages timed per reader (default 5)")
    args = parser.parse_args()
    nbytes = args.mib * 2**20
    print(f"one float32 tensor of {args.mib} MiB per message, {args.reps} messages per reader")
    results = {}
    for reader in ("old", "new", "old", "new"):  # interleaved, so neither reader gets a quieter machine
        results.setdefault(reader, []).extend(measure(reader, nbytes, args.reps))
    for reader, label in (("old", "recv_bytes_into (BytesIO copy)"), ("new", "os.readv into the tensor")):
        rates = results[reader]
        print(f"{label:32s} median {statistics.median(rates):6.2f} GB/s   best {max(rates):6.2f} GB/s")
    print(f"speed-up (median): {statistics.median(results['new']) / statistics.median(results['old']):.2f}x")


if __name__ == "__main__":
    main()
