"""A system-call deny-list for candidate workers: a small classic-BPF seccomp filter, built with ctypes.

Installed last by ``kbv.worker.confine`` (after the namespaces, mounts and the user change, before any candidate
code). Every call a kernel never needs, and every call that could undo or see around the confinement, returns
``EPERM``: tracing and other processes' memory, mounting and namespaces, kernel modules and kexec, BPF, keyrings,
file handles, userfaultfd, perf events, io_uring, setting clocks, reboot, swap, accounting. ``clone`` with a
namespace flag is refused too, and ``clone3`` answers ``ENOSYS`` (its flags are behind a pointer the filter cannot
read; glibc then falls back to ``clone``). System calls of another ABI (i386 through ``int 0x80``, x32) are refused
whole. x86_64 only: elsewhere ``install`` installs nothing and says why (the worker records it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
NR_SECCOMP = 317
NR_CLONE = 56
NR_CLONE3 = 435
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 \
    | 0x00000080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME

#: x86_64 system calls refused with EPERM once the worker is confined (name: number).
DENIED: dict[str, int] = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "setns": 308, "unshare": 272,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "open_tree_attr": 467,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "create_module": 174, "get_kernel_syms": 177, "query_module": 178, "uselib": 134, "nfsservctl": 180,
    "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "userfaultfd": 323, "perf_event_open": 298,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179, "quotactl_fd": 443,
    "iopl": 172, "ioperm": 173, "syslog": 103, "lookup_dcookie": 212, "vhangup": 153,
    "sethostname": 170, "setdomainname": 171,
}

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program() -> bytes:
    """The filter as raw ``sock_filter`` instructions (seccomp_data: nr at 0, arch at 4, args from 16)."""
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    out = [
        _insn(_LD_W_ABS, 0, 0, 4),                      # arch
        _insn(_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, eperm),                     # another ABI (i386)
        _insn(_LD_W_ABS, 0, 0, 0),                      # nr
        _insn(_JGE_K, 0, 1, X32_SYSCALL_BIT),
        _insn(_RET_K, 0, 0, eperm),                     # x32
        _insn(_JEQ_K, 0, 1, NR_CLONE3),
        _insn(_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        _insn(_JEQ_K, 0, 4, NR_CLONE),
        _insn(_LD_W_ABS, 0, 0, 16),                     # clone's flags (low 32 bits of args[0])
        _insn(_JSET_K, 0, 1, CLONE_NAMESPACES),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    for nr in sorted(set(DENIED.values())):
        out += [_insn(_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, eperm)]
    out.append(_insn(_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> tuple[bool, str]:
    machine = platform.machine()
    if machine != "x86_64":
        return False, f"seccomp filter not installed: kbv's filter is for x86_64, this is {machine}"
    return True, ""


def install() -> tuple[bool, str]:
    """Set no_new_privs and install the filter on every thread of this process; (installed, why not)."""
    ok, why = supported()
    if not ok:
        return False, why
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False, f"no_new_privs refused: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    code = program()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(NR_SECCOMP), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                    ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog)) == 0:
        return True, ""
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0:
        return True, "installed on the calling thread only (no TSYNC)"
    return False, f"seccomp refused: {errno.errorcode.get(ctypes.get_errno(), '?')}"
