"""OS hardening for worker processes that load and run untrusted compiled kernels.

A kernel is native code generated from a model-written schedule. The evaluator refuses scripts
that could reach the OS before anything is built; this module is defence in depth for a kernel
that gets there anyway. `harden()` is called once in a worker after it has imported what it
needs, and makes the process unable to:

  - start programs or processes: execve/fork/vfork/clone without CLONE_THREAD fail (EPERM), so
    `system()`, `popen()` and `subprocess` fail; threads keep working;
  - use the network: socket creation and connect/bind/listen/accept fail; where the OS allows,
    the process also moves to a new, empty network namespace;
  - create, modify or delete files: opening for write/create/truncate/append, mkdir, unlink,
    rename, link, chmod, chown, truncate and xattr writes fail;
  - reach around the filter: ptrace, process_vm_writev, io_uring, mount, namespace changes,
    kernel modules, kexec and reboot fail;
  - dump core (RLIMIT_CORE=0): crashing kernels are expected and each core would be a disk-sized file.

It does not protect against a kernel that computes wrong answers, burns CPU or memory until the
parent's limits end it, reads any file the worker's user may read, writes to file descriptors
the worker already holds (its pipes, stdout/stderr), or signals other processes of its user.
Reading keeps working (imports, dlopen of .so files, /proc); Python's failure to write .pyc files
is harmless (it ignores OSError there). The worker needs nothing that is refused: it talks to its
parent over inherited pipes with read/write. But it must import what it needs first: an import
that opens a file for writing fails afterwards (dill opens /dev/null "r+b" at import, and
importing tvm imports torch, which imports dill).

Linux only, x86_64 and aarch64 for seccomp; every layer the OS refuses is skipped, never raised.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import platform
import resource
import subprocess
import sys

_PR_SET_NO_NEW_PRIVS = 38
_CLONE_THREAD, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00010000, 0x10000000, 0x40000000
# O_TMPFILE needs O_WRONLY or O_RDWR, so it is covered too.
_OPEN_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# name: (x86_64, aarch64) syscall number; None where aarch64 has only the *at form (its libc uses that).
_NR = {
    "execve": (59, 221), "execveat": (322, 281), "fork": (57, None), "vfork": (58, None),
    "clone": (56, 220), "clone3": (435, 435),
    "socket": (41, 198), "socketpair": (53, 199), "connect": (42, 203), "bind": (49, 200),
    "listen": (50, 201), "accept": (43, 202), "accept4": (288, 242),
    "open": (2, None), "openat": (257, 56), "openat2": (437, 437), "creat": (85, None),
    "open_by_handle_at": (304, 265),
    "mkdir": (83, None), "mkdirat": (258, 34), "rmdir": (84, None), "unlink": (87, None),
    "unlinkat": (263, 35), "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276),
    "link": (86, None), "linkat": (265, 37), "symlink": (88, None), "symlinkat": (266, 36),
    "mknod": (133, None), "mknodat": (259, 33), "truncate": (76, 45),
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "chown": (92, None), "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "setxattrat": (463, 463),
    "removexattr": (197, 14), "lremovexattr": (198, 15), "fremovexattr": (199, 16),
    "removexattrat": (466, 466), "file_setattr": (469, 469),
    "ptrace": (101, 117), "process_vm_writev": (311, 271),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "open_tree_attr": (467, 467),
    "unshare": (272, 97), "setns": (308, 268),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    # What root could still do to the host without files or processes; x86_64 only for port I/O.
    "bpf": (321, 280), "iopl": (172, None), "ioperm": (173, None), "swapon": (167, 224),
    "swapoff": (168, 225), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "adjtimex": (159, 171), "clock_adjtime": (305, 266), "sethostname": (170, 161),
    "setdomainname": (171, 162), "acct": (163, 89),
}
_ARCHES = {"x86_64": (0xC000003E, 317, 0), "aarch64": (0xC00000B7, 277, 1)}  # audit arch, seccomp nr, column

# ENOSYS where callers are known to fall back to an older call: glibc retries clone3 as clone (which
# the filter can inspect; clone3's flags sit behind a pointer it cannot read) and libraries probing
# io_uring or openat2 then use plain syscalls; everything else that is refused gets EPERM.
_ENOSYS = {"clone3", "openat2", "io_uring_setup", "io_uring_enter", "io_uring_register"}
# Refused only for some argument values: (argument index, flag mask, refuse when the mask is set).
# Threads are clone(CLONE_THREAD | ...); fork, vfork and posix_spawn are clone without it.
# Reading must keep working (imports, dlopen), so opens are refused only when they ask to write.
_BY_FLAGS = {"clone": (0, _CLONE_THREAD, False), "open": (1, _OPEN_WRITE, True),
             "openat": (2, _OPEN_WRITE, True)}
# Deliberately allowed: read/write/sendto/sendmsg (the parent pipes; without socket/connect a kernel
# has no socket to send on: the worker inherits only pipes), memfd_create (LLVM's JIT may use it),
# kill (the parent's deadline is the defence there), setuid and friends (no_new_privs means they
# can only drop privileges), utimensat (timestamps only).

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|..|K, BPF_RET|K
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000  # x32 syscalls pass the x86_64 arch check with numbers offset by this bit


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _ok(rc: int) -> bool:
    return rc == 0


def _deny(name: str) -> int:
    return _RET_ERRNO | (errno.ENOSYS if name in _ENOSYS else errno.EPERM)


def seccomp_program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions. Offsets into struct seccomp_data: nr 0, arch 4,
    args[i] at 16 + 8*i; both arches are little-endian, so that is an argument's low 32 bits,
    where every flag checked here lives."""
    audit_arch, _, col = _ARCHES[arch]
    # A syscall made through another ABI (int 0x80 on x86_64) has other numbers: refuse them all.
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, audit_arch), (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS),
            (_LD_ABS, 0, 0, 0)]
    if arch == "x86_64":
        prog += [(_JGE, 0, 1, _X32_BIT), (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    for name, (arg, mask, refuse_if_set) in _BY_FLAGS.items():
        nr = _NR[name][col]
        if nr is not None:  # each block ends in a return, so the accumulator need not be reloaded
            prog += [(_JEQ, 0, 4, nr), (_LD_ABS, 0, 0, 16 + 8 * arg),
                     (_JSET, 0, 1, mask) if refuse_if_set else (_JSET, 1, 0, mask),
                     (_RET, 0, 0, _deny(name)), (_RET, 0, 0, _RET_ALLOW)]
    for name, numbers in _NR.items():
        if name not in _BY_FLAGS and numbers[col] is not None:
            prog += [(_JEQ, 0, 1, numbers[col]), (_RET, 0, 0, _deny(name))]
    return prog + [(_RET, 0, 0, _RET_ALLOW)]


def _install_seccomp(libc) -> bool:
    arch = platform.machine()
    if arch not in _ARCHES:
        return False
    prog = seccomp_program(arch)
    fprog = _SockFprog(len(prog), (_SockFilter * len(prog))(*prog))
    # The seccomp syscall with TSYNC, not prctl(PR_SET_SECCOMP): a filter binds only the calling
    # thread and its future children, and the worker already has threads (OpenBLAS starts its pool
    # at import). TSYNC also copies no_new_privs to them. It returns a thread id when one cannot sync.
    set_mode_filter, flag_tsync = 1, 1
    rc = libc.syscall(ctypes.c_long(_ARCHES[arch][1]), ctypes.c_long(set_mode_filter),
                      ctypes.c_long(flag_tsync), ctypes.byref(fprog))
    return _ok(rc)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _map_own_ids(uid: int, gid: int) -> None:
    """Keep the same uid/gid inside the new user namespace (else they read as 65534 'nobody')."""
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError:
            return


def _unshare_network(libc) -> list[str]:
    """A new empty network namespace: only loopback, and down. Tried first with a new user
    namespace, which also takes away root's powers over the host (capabilities then count only
    inside the new namespaces; files root owns stay readable) and needs no privilege where the
    distribution allows unprivileged user namespaces; the kernel allows it only in a
    single-threaded process (EINVAL otherwise). Then a network namespace alone, which needs
    CAP_SYS_ADMIN. Namespaces belong to threads: threads started before this call keep the host
    network, which is why the label says so; the seccomp socket rules cover them."""
    uid, gid = os.getuid(), os.getgid()
    if _threads() == 1 and _ok(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)):
        _map_own_ids(uid, gid)
        return ["userns", "netns"]
    if _ok(libc.unshare(_CLONE_NEWNET)):
        return ["netns" if _threads() == 1 else "netns:this-thread"]
    return []


def harden(*, seccomp: bool = True) -> list[str]:
    """Apply every layer this OS allows to the calling process, irreversibly; return their names."""
    if not sys.platform.startswith("linux"):
        return []
    libc, applied = _libc(), []
    # Exec can then never gain privileges (setuid binaries, file capabilities); seccomp needs it
    # to install a filter without CAP_SYS_ADMIN.
    if _ok(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)):
        applied.append("no_new_privs")
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        applied.append("rlimit_core=0")
    except (ValueError, OSError):
        pass
    # Not RLIMIT_FSIZE: it also applies to files opened before (stdout/stderr redirected to a log
    # file), where the first write past it kills the worker with SIGXFSZ; seccomp refuses opening
    # files for writing instead. Not RLIMIT_NPROC: root ignores it.
    applied += _unshare_network(libc)  # before seccomp, which refuses unshare
    if seccomp and _install_seccomp(libc):
        applied.append("seccomp")
    return applied


@functools.lru_cache(maxsize=None)
def status() -> dict:
    """Which layers `harden()` applies on this machine, found by running it in a fresh interpreter
    (it cannot be undone, so not in this one). That interpreter is single-threaded; a worker with
    threads gets "netns:this-thread" instead of "userns" + "netns"."""
    layers = ["no_new_privs", "rlimit_core=0", "userns", "netns", "seccomp"]
    result = {"platform": sys.platform, "arch": platform.machine(), **{k: False for k in layers}}
    if not sys.platform.startswith("linux"):
        return result
    try:
        out = subprocess.run([sys.executable, "-I", os.path.abspath(__file__)], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        applied = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return result
    return {**result, **{k: k in applied for k in layers}}


if __name__ == "__main__":  # the probe behind status(): standard library only, run as a file
    print(json.dumps(harden()))
