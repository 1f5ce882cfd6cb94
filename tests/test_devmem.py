"""The parent's own reading of a process's device memory (kbv.sandbox.devmem): the driver's figure, which the
worker cannot change."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import torch

from kbv.sandbox import devmem


def test_without_nvml_there_is_no_figure(monkeypatch) -> None:
    """No NVML (this CPU machine, a container without the driver's library): None, never a made-up zero."""
    devmem._library.cache_clear()
    monkeypatch.setattr(devmem.ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    try:
        assert devmem.used_by([1]) is None and not devmem.available()
    finally:
        devmem._library.cache_clear()


def test_an_idle_workers_gpu_samples_are_counted_per_pid_after_the_given_time(monkeypatch) -> None:
    """kbv.sandbox.devbusy: NVML's per-process utilisation samples since a moment (asked for their count, then
    read), per wanted pid the samples naming it and its highest SM share; another process's samples not counted; no
    sample since then (NVML's 'not found') is (0, 0); NVML missing or failing is None, never a made-up zero."""
    from kbv.sandbox import devbusy

    asked: list[int] = []

    class Lib:
        mode = "samples"

        def nvmlDeviceGetCount_v2(self, count):
            count._obj.value = 1
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
            return 0

        def nvmlDeviceGetProcessUtilization(self, handle, samples, n, after):
            asked.append(after.value)
            if self.mode == "none":
                return 6  # NVML_ERROR_NOT_FOUND
            if self.mode == "fail":
                return 999
            if samples is None:
                n._obj.value = 3
                return 7  # NVML_ERROR_INSUFFICIENT_SIZE
            for i, (pid, sm) in enumerate([(11, 40), (11, 95), (99, 100)]):
                samples[i].pid, samples[i].smUtil = pid, sm
            n._obj.value = 3
            return 0

    lib = Lib()
    monkeypatch.setattr(devbusy.devmem, "nvml", lambda: lib)
    assert devbusy.busy([11, 12], 1700000000.5) == {11: (2, 95), 12: (0, 0)}
    assert asked == [1700000000500000, 1700000000500000]  # microseconds, as NVML counts
    lib.mode = "none"
    assert devbusy.busy([11], 0.0) == {11: (0, 0)}
    lib.mode = "fail"
    assert devbusy.busy([11], 0.0) is None
    monkeypatch.setattr(devbusy.devmem, "nvml", lambda: None)
    assert devbusy.busy([11], 0.0) is None


def test_a_figure_nvml_cannot_give_is_none(monkeypatch) -> None:
    """NVML's 'not available' value (a restricted container) is no figure, not 16 EiB held."""
    class Lib:
        def nvmlDeviceGetCount_v2(self, count):
            count._obj.value = 1
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
            return 0

    def query(handle, n, infos):
        infos[0].pid, infos[0].usedGpuMemory = 4242, 2**64 - 1
        n._obj.value = 1
        return 0

    monkeypatch.setattr(devmem, "_library", lambda: (Lib(), query))
    assert devmem.used_by([4242]) is None
    infos_seen = []

    def query_ok(handle, n, infos):
        infos[0].pid, infos[0].usedGpuMemory = 4242, 3 * 2**20
        infos[1].pid, infos[1].usedGpuMemory = 7, 2**30
        n._obj.value = 2
        infos_seen.append(True)
        return 0

    monkeypatch.setattr(devmem, "_library", lambda: (Lib(), query_ok))
    assert devmem.used_by([4242, 5]) == {4242: 3 * 2**20, 5: 0}  # another process's memory is not counted
    assert devmem.entries([4242, 5]) == [(4242, 3 * 2**20)]
    assert infos_seen

    def query_twice(handle, n, infos):  # one pid listed twice: both entries kept, and both counted
        for i in range(2):
            infos[i].pid, infos[i].usedGpuMemory = 4242, 2**20
        n._obj.value = 2
        return 0

    monkeypatch.setattr(devmem, "_library", lambda: (Lib(), query_twice))
    assert devmem.entries([4242]) == [(4242, 2**20), (4242, 2**20)]
    assert devmem.used_by([4242]) == {4242: 2 * 2**20}


def test_the_devices_free_memory_is_nvmls_and_none_where_it_cannot_say(monkeypatch) -> None:
    """``free_bytes(gpu)``: NVML's free figure for that GPU (the room a nearly-filling correctness stage makes,
    kbv.eval.pair); a GPU NVML does not list, or a failing query, is None, never a made-up figure."""
    class Lib:
        def __init__(self, status: int = 0):
            self.status = status

        def nvmlDeviceGetCount_v2(self, count):
            count._obj.value = 2
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
            handle._obj.value = 100 + index
            return 0

        def nvmlDeviceGetMemoryInfo(self, handle, memory):
            memory._obj.total, memory._obj.free = 80 * 2**30, (handle.value - 100 + 1) * 2**30
            return self.status

    monkeypatch.setattr(devmem, "_library", lambda: (Lib(), None))
    assert devmem.free_bytes(None) == 2**30 and devmem.free_bytes(1) == 2 * 2**30
    assert devmem.free_bytes(2) is None
    monkeypatch.setattr(devmem, "_library", lambda: (Lib(status=999), None))
    assert devmem.free_bytes(0) is None
    monkeypatch.setattr(devmem, "_library", lambda: None)
    assert devmem.free_bytes(0) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_childs_allocation_is_counted_by_the_parent() -> None:
    """A child that holds 512 MiB (raw bytes, outside any figure it reports) shows at least that much to the
    parent, and a process holding nothing shows nothing."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import torch, sys; x = torch.empty(512 * 2**20, dtype=torch.uint8, device='cuda'); "
                              "torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        seen = None
        for _ in range(20):  # the driver's count may lag the allocation by a moment
            seen = devmem.used_by([child.pid])
            if seen and seen[child.pid] >= 512 * 2**20:
                break
            time.sleep(0.1)
        assert seen is not None, "NVML could not be read on a CUDA machine"
        assert seen[child.pid] >= 512 * 2**20
        idle = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            assert devmem.used_by([idle.pid]) == {idle.pid: 0}
        finally:
            idle.communicate("")
    finally:
        child.communicate("")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_childs_kernels_after_its_reply_show_in_the_drivers_samples() -> None:
    """The figure behind ``timing_ms.idle_gpu``: a child that answers, then keeps the GPU busy from a thread for
    about two seconds, is named in the driver's utilisation samples taken after its answer, with SM use well above
    zero; one that answers and then only waits is named with next to none (on the H100 once with 1 %: a sample that
    still covered its set-up, which now ends a second before it answers)."""
    from kbv.sandbox import devbusy

    code = ("import torch, sys, threading, time; a = torch.randn(4096, 4096, device='cuda'); torch.cuda.synchronize(); "
            "busy = sys.argv[1] == '1'\n"
            "def spin():\n    end = time.time() + 2.0\n    while time.time() < end:\n        a @ a\n"
            "    torch.cuda.synchronize()\n"
            "time.sleep(1.0); print('ready', flush=True)\n"
            "if busy:\n    threading.Thread(target=spin).start()\n"
            "sys.stdin.read()")
    seen = {}
    for busy in ("1", "0"):
        child = subprocess.Popen([sys.executable, "-c", code, busy], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            since = time.time()
            time.sleep(2.0)
            seen[busy] = devbusy.busy([child.pid], since)
            if busy == "1":  # each sample's time is its own, after the moment asked for
                timed = devbusy.samples([child.pid], since)
                assert timed and all(pid == child.pid and 0 <= offset < 10 for pid, offset, _ in timed), timed
        finally:
            child.communicate("")
    assert seen["1"] is not None, "NVML's utilisation samples could not be read on a CUDA machine"
    samples, most = seen["1"][list(seen["1"])[0]]
    assert samples >= 1 and most >= 20, seen
    assert seen["0"] is not None and list(seen["0"].values())[0][1] <= 5, seen


def test_a_watch_keeps_each_processs_peak_and_their_largest_sum_at_one_sample() -> None:
    """The correctness stage's device-memory figure: per role the most it held, and the most both held at once
    (not the sum of two peaks reached at different times); None where NVML cannot be read."""
    readings = iter([{1: 10, 2: 0}, {1: 50, 2: 5}, {1: 5, 2: 40}])
    stop = threading.Event()

    def read(pids):
        try:
            return next(readings)
        except StopIteration:
            stop.set()
            return {1: 0, 2: 0}

    with devmem.Watch({"reference": 1, "candidate": 2}, period=0.001, read=read) as watch:
        assert stop.wait(5)
    assert watch.result() == {"held_max": {"reference": 50, "candidate": 40}, "together_max": 55,
                              "samples": watch.samples}
    with devmem.Watch({"reference": 1}, read=lambda pids: None) as blind:
        pass
    assert blind.result() is None
    trees = {1: [1, 11], 2: [2, 21]}  # a sandboxed worker's CUDA runs in an inner process: its tree is counted
    with devmem.Watch({"reference": 1, "candidate": 2}, read=lambda pids: {p: p for p in pids},
                      tree=trees.__getitem__) as nested:
        pass
    assert nested.result()["held_max"] == {"reference": 12, "candidate": 23}


def test_the_gpus_clock_and_the_drivers_reasons_for_it_are_read_from_nvml(monkeypatch) -> None:
    """kbv.sandbox.devclock: the SM clock (NVML's clock 1) and the reason bits named (NVML 12.2's name for the call
    first, the older one where only it exists); reasons None where NVML gives none; no NVML, or a failed clock, None,
    never a made-up figure."""
    from kbv.sandbox import devclock

    class Lib:
        clock_status = 0

        def nvmlDeviceGetCount_v2(self, count):
            count._obj.value = 1
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
            return 0

        def nvmlDeviceGetClockInfo(self, handle, kind, mhz):
            assert kind == 1  # NVML_CLOCK_SM
            mhz._obj.value = 1755
            return self.clock_status

    class Older(Lib):
        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, bits):
            bits._obj.value = 0x4 | 0x200  # software power cap, and a bit with no name here
            return 0

    monkeypatch.setattr(devclock.devmem, "nvml", lambda: Lib())
    assert devclock.reading(0) == {"sm_mhz": 1755, "reasons": None}
    assert devclock.reading(1) is None  # no such GPU
    monkeypatch.setattr(devclock.devmem, "nvml", lambda: Older())
    assert devclock.reading(None) == {"sm_mhz": 1755, "reasons": ["sw_power_cap", "0x200"]}
    failing = Older()
    failing.clock_status = 999
    monkeypatch.setattr(devclock.devmem, "nvml", lambda: failing)
    assert devclock.reading(0) is None
    monkeypatch.setattr(devclock.devmem, "nvml", lambda: None)
    assert devclock.reading(0) is None


def test_a_cpus_clock_is_read_from_cpufreq_or_else_from_proc_cpuinfo(monkeypatch) -> None:
    """kbv.sandbox.devclock.cpu_mhz: cpufreq's ``scaling_cur_freq`` (kHz) where the host exposes it, ``/proc/cpuinfo``'s
    ``cpu MHz`` for the CPUs it does not; only the CPUs asked for; None where neither says, or none are asked."""
    from kbv.sandbox import devclock

    files = {"/sys/devices/system/cpu/cpu3/cpufreq/scaling_cur_freq": "1500000\n",
             "/proc/cpuinfo": "processor\t: 2\ncpu MHz\t\t: 2445.404\n\nprocessor\t: 3\ncpu MHz\t\t: 999.0\n"
                              "\nprocessor\t: 4\ncpu MHz\t\t: 3100.5\n"}

    class FakePath:
        def __init__(self, path: str) -> None:
            self.path = path

        def read_text(self) -> str:
            if self.path not in files:
                raise FileNotFoundError(self.path)
            return files[self.path]

    monkeypatch.setattr(devclock, "Path", FakePath)
    assert devclock.cpu_mhz({2, 3}) == {"2": 2445.404, "3": 1500.0}
    assert devclock.cpu_mhz({7}) is None
    assert devclock.cpu_mhz(set()) is None
    del files["/proc/cpuinfo"]
    assert devclock.cpu_mhz({2, 3}) == {"3": 1500.0}
