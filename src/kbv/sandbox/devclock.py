"""The GPU's streaming-multiprocessor clock, and the reasons the driver gives for holding it where it is, read by the
parent from NVML around every timing command (``timing_ms.command_clocks``, a diagnostic that decides nothing).

A reference's whole timing commands can run at one of two speeds under the verified baseline while its standard
ones hold steady (level3/3 at 0.68-0.74 or 1.05-1.18 ms, level1/10 at 0.20 or 0.28-0.32 ms, on the H100 of
docs/results/h100-2026-12-07-d, pinned to CPUs or not): each command's clock, beside its medians, says whether the
GPU's clock moved with them (it did not: 1,980 MHz in every command of both speeds, h100-2026-12-07-e), and
``cpu_mhz`` what the host says the clock of each CPU the timing workers are pinned to is. ``reading(gpu)`` is None
where NVML is missing or refuses.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from kbv.sandbox import devmem

_NVML_SUCCESS = 0
_NVML_CLOCK_SM = 1
# nvmlClocksEventReasons (named throttle reasons before NVML 12.2), the bits a reading names
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
           0x100: "display_clock"}


def reading(gpu: int | None) -> dict[str, Any] | None:
    """GPU ``gpu``'s SM clock in MHz and the names of the reasons NVML gives for it (NVML's index, as ``nvidia-smi
    -i``; the first where None): ``{"sm_mhz": n, "reasons": [...]}``, ``reasons`` None where NVML gives none."""
    lib = devmem.nvml()
    if lib is None:
        return None
    mhz = ctypes.c_uint()
    bits = ctypes.c_ulonglong()
    with devmem.LOCK:
        handle = devmem.device_handle(lib, gpu)
        if handle is None or lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(mhz)) != _NVML_SUCCESS:
            return None
        why = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        known = why is not None and why(handle, ctypes.byref(bits)) == _NVML_SUCCESS
    return {"sm_mhz": int(mhz.value), "reasons": named(int(bits.value)) if known else None}


def named(bits: int) -> list[str]:
    """The names of the reason bits set in ``bits`` (an unnamed bit as its hex value)."""
    return [REASONS.get(1 << i, hex(1 << i)) for i in range(64) if bits >> i & 1]


def cpu_mhz(cpus: set[int]) -> dict[str, float] | None:
    """The current clock in MHz of each of ``cpus`` by its number (as a string, a record's key): cpufreq's
    ``scaling_cur_freq`` where the host exposes it, else ``/proc/cpuinfo``'s ``cpu MHz``; None where neither says."""
    found: dict[str, float] = {}
    for cpu in sorted(cpus):
        try:
            found[str(cpu)] = int(Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq").read_text()) / 1e3
        except (OSError, ValueError):
            continue
    if len(found) < len(cpus):
        found |= {k: v for k, v in _cpuinfo_mhz().items() if int(k) in cpus and k not in found}
    return found or None


def _cpuinfo_mhz() -> dict[str, float]:
    """``cpu MHz`` of every processor in ``/proc/cpuinfo``, by its number."""
    found: dict[str, float] = {}
    processor = None
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        try:
            if key == "processor":
                processor = int(value)
            elif key == "cpu MHz" and processor is not None:
                found[str(processor)] = float(value)
        except ValueError:
            continue
    return found
