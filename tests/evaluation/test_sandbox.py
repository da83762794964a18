"""The worker sandbox: after harden(), a process cannot start programs, open sockets or change
files, while threads, reading, imports, inherited pipes and TVM kernels keep working.

harden() cannot be undone, so each test runs it in a fresh interpreter (or a dragonlab worker)
and checks the file system from here afterwards."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dragonlab.evaluation import sandbox

REPO = Path(__file__).resolve().parents[2]

# Runs in the child before each test's code: the imports a worker does first, harden, and
# `refused(fn)` for calls that must fail.
PRELUDE = """
import json, os, sys
{imports}
from dragonlab.evaluation.sandbox import harden
APPLIED = harden()

def refused(fn, *args):
    try:
        result = fn(*args)
    except OSError as e:
        return e.errno
    raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} was allowed: {result!r}")
"""


def run_hardened(code: str, *, imports: str = "", env: dict | None = None, timeout: float = 300) -> str:
    """Run PRELUDE + `code` in a fresh interpreter; fail with its stderr unless it exits 0. Like a
    worker, import heavy modules (`imports`) before harden: importing tvm pulls in torch and dill,
    which opens /dev/null for writing at import, refused once hardened."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "", **(env or {})}
    source = PRELUDE.replace("{imports}", imports) + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", source], cwd=REPO, env=full_env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def require(layer: str) -> None:
    if not sandbox.status()[layer]:
        pytest.skip(f"{layer} is not available on this machine ({sandbox.status()})")


def test_harden_reports_what_this_machine_allows():
    status = sandbox.status()
    if not sys.platform.startswith("linux"):
        assert sandbox.harden() == []
        return
    applied = json.loads(run_hardened("print(json.dumps(APPLIED))").strip().splitlines()[-1])
    assert {"no_new_privs", "rlimit_core=0"} <= set(applied)
    assert {k for k in ("userns", "netns", "seccomp") if status[k]} == \
        {k for k in ("userns", "netns", "seccomp") if k in applied}


def test_harden_is_a_no_op_off_linux(monkeypatch):
    monkeypatch.setattr(sandbox.sys, "platform", "darwin")
    assert sandbox.harden() == []
    assert not any(v for k, v in sandbox.status.__wrapped__().items() if k not in ("platform", "arch"))


def test_the_syscall_table_matches_the_kernel_headers():
    header = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
              "aarch64": "/usr/include/asm-generic/unistd.h"}.get(os.uname().machine)
    if not header or not os.path.exists(header):
        pytest.skip("no kernel headers for this architecture")
    text = Path(header).read_text()
    col = sandbox._ARCHES[os.uname().machine][2]
    checked = 0
    for name, numbers in sandbox._NR.items():
        m = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)", text)
        if m:  # headers older than the kernel lack the newest calls
            assert numbers[col] == int(m.group(1)), name
            checked += 1
    assert checked > 50


def test_shell_commands_do_not_run(tmp_path):
    require("seccomp")
    target = tmp_path / "pwned"
    run_hardened(f"""
        assert os.system("touch {target}") != 0
        import ctypes
        assert ctypes.CDLL(None).system(b"touch {target}") != 0
        import subprocess
        refused(subprocess.run, ["true"])
        refused(subprocess.run, ["/bin/sh", "-c", "touch {target}"])
    """)
    assert not target.exists()


def test_processes_cannot_be_forked_and_clone3_reports_enosys():
    require("seccomp")
    run_hardened("""
        import ctypes, errno
        assert refused(os.fork) == errno.EPERM
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(435, 0, 0) == -1 and ctypes.get_errno() == errno.ENOSYS  # clone3
    """)


def test_sockets_cannot_be_created():
    require("seccomp")
    run_hardened("""
        import socket
        refused(socket.socket)
        refused(socket.socket, socket.AF_UNIX)
        refused(socket.socketpair)
    """)


def test_ways_around_the_filter_and_root_powers_are_refused():
    require("seccomp")
    nr = {name: numbers[sandbox._ARCHES[os.uname().machine][2]] for name, numbers in sandbox._NR.items()}
    run_hardened(f"""
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        def fails(name, *args):
            assert libc.syscall(ctypes.c_long({nr}[name]), *map(ctypes.c_long, args)) == -1, name
            return ctypes.get_errno()
        assert fails("unshare", 0x40000000) == errno.EPERM  # back to a namespace of one's choosing
        assert fails("setns", 0, 0) == errno.EPERM
        assert fails("mount", 0, 0, 0, 0, 0) == errno.EPERM
        assert fails("ptrace", 16, 0x3FFFFFFF, 0, 0) == errno.EPERM  # PTRACE_ATTACH; unfiltered: ESRCH
        assert fails("bpf", 0, 0, 0) == errno.EPERM
        assert fails("io_uring_setup", 1, 0) == errno.ENOSYS  # its openat ops would skip seccomp
        assert fails("openat2", -100, 0, 0, 0) == errno.ENOSYS
        assert fails("execveat", -100, 0, 0, 0, 0) == errno.EPERM
    """)


def test_files_cannot_be_created_changed_or_removed(tmp_path):
    require("seccomp")
    existing = tmp_path / "existing.txt"
    existing.write_text("original")
    new = tmp_path / "new.txt"
    run_hardened(f"""
        refused(open, "{new}", "w")
        refused(open, "{new}", "x")
        refused(open, "{existing}", "a")
        refused(open, "{existing}", "r+")
        refused(os.open, "{new}", os.O_CREAT | os.O_RDONLY)
        refused(os.mkdir, "{tmp_path}/dir")
        refused(os.unlink, "{existing}")
        refused(os.rename, "{existing}", "{new}")
        refused(os.link, "{existing}", "{new}")
        refused(os.symlink, "{existing}", "{new}")
        refused(os.chmod, "{existing}", 0o777)
        refused(os.truncate, "{existing}", 0)
    """)
    assert existing.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.txt"]


def test_reading_and_imports_keep_working_and_pyc_writes_fail_quietly(tmp_path):
    require("seccomp")
    (tmp_path / "fresh_module.py").write_text("VALUE = 42\n")
    (tmp_path / "data.txt").write_text("hello")
    out = run_hardened(f"""
        sys.path.insert(0, "{tmp_path}")
        import fresh_module, email.mime.text, decimal
        print(fresh_module.VALUE, open("{tmp_path}/data.txt").read(), len(os.listdir("/proc/self/fd")) > 0)
    """)
    assert out.split() == ["42", "hello", "True"]
    assert not (tmp_path / "__pycache__").exists()


def test_threads_and_threaded_numpy_keep_working():
    require("seccomp")
    out = run_hardened("""
        import threading
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(i)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        a = np.random.default_rng(0).standard_normal((512, 512))
        assert np.allclose(a @ np.eye(512), a)
        print(sorted(results) == list(range(8)), len(os.listdir("/proc/self/task")))
    """, imports="import numpy as np", env={"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"})
    ok, threads = out.split()
    assert ok == "True" and int(threads) >= 2


def test_threads_started_before_harden_are_restricted_too(tmp_path):
    """seccomp with TSYNC covers every thread, not only the one calling harden."""
    require("seccomp")
    target = tmp_path / "early"
    out = run_hardened("""
        go.set()
        early.join()
        print(outcome)
    """, imports=f"TARGET = {str(target)!r}" + textwrap.dedent("""
        import socket, threading
        go, outcome = threading.Event(), []
        def attempt():
            go.wait()
            for fn in (socket.socket, lambda: open(TARGET, "w")):
                try:
                    fn()
                    outcome.append("allowed")
                except OSError as e:
                    outcome.append(e.errno)
        early = threading.Thread(target=attempt)
        early.start()
    """))
    assert out.strip().splitlines()[-1] == "[1, 1]"  # EPERM both
    assert not target.exists()


def test_an_inherited_pipe_keeps_working():
    read_end, write_end = os.pipe()
    source = PRELUDE.replace("{imports}", "") + f"os.write({write_end}, b'after harden')"
    out = subprocess.run([sys.executable, "-c", source], cwd=REPO, pass_fds=(write_end,), capture_output=True,
                         text=True, timeout=60)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        assert f.read() == b"after harden", out.stderr


def _probe_in_worker(path, *, progress):
    """Runs in a sandbox worker, where this module is imported after harden (pytest included)."""
    import socket
    outcome = {}
    for name, fn in (("write", lambda: open(path, "w")), ("socket", socket.socket)):
        try:
            fn()
            outcome[name] = "allowed"
        except OSError as e:
            outcome[name] = e.errno
    return outcome


def test_a_sandbox_worker_refuses_writes_and_sockets_and_keeps_answering(tmp_path, monkeypatch):
    require("seccomp")
    from dragonlab.evaluation.workers import Worker

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # this module, importable there
    w = Worker(sandbox=True)
    try:
        outcome = w.call(_probe_in_worker, str(tmp_path / "f"))
        assert outcome == {"write": 1, "socket": 1}  # EPERM both
        assert w.call(_probe_in_worker, str(tmp_path / "g")) == outcome  # the pipes still work
    finally:
        w.close()
    assert not list(tmp_path.iterdir())


def test_a_sandbox_worker_has_every_layer_and_namespaces_of_its_own(monkeypatch):
    """Forked from its zygote, a worker is single-threaded when it hardens: it gets a user and a
    network namespace of its own where the machine allows them (a fresh interpreter has numpy's
    threads by then, and its network namespace is its main thread's only)."""
    require("seccomp")
    from dragonlab.evaluation.workers import ZYGOTES, Worker
    from dragonlab.testing import worker_jobs

    monkeypatch.setenv("PYTHONPATH", str(REPO))  # worker_jobs from this checkout, whatever is installed
    w = Worker(sandbox=True)
    try:
        state = w.call(worker_jobs.sandbox_state)
    finally:
        w.close()
    assert state["seccomp"] == 2 and state["no_new_privs"] == 1  # 2: a filter
    allowed = sandbox.status()
    if allowed["netns"]:
        assert state["netns"] != os.readlink("/proc/self/ns/net")
    if allowed["userns"] and ZYGOTES:
        assert state["userns"] != os.readlink("/proc/self/ns/user")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Two exported TVM kernels: B = A + 1, and one whose body calls libc system("touch FILE")."""
    import numpy as np
    import tvm
    from tvm import te

    root = tmp_path_factory.mktemp("kernels")
    target = tvm.target.Target({"kind": "llvm"})
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    tvm.compile(tvm.IRModule({"main": te.create_prim_func([A, B])}), target=target).export_library(
        str(root / "add_one.so"))
    touched = root / "touched_by_kernel"
    C = te.compute((1,), lambda i: tvm.tirx.call_extern("int32", "system", f"touch {touched}"), name="C")
    tvm.compile(tvm.IRModule({"main": te.create_prim_func([C])}), target=target).export_library(
        str(root / "calls_system.so"))
    tvm.runtime.load_module(str(root / "calls_system.so"))["main"](tvm.runtime.tensor(np.zeros(1, "int32")))
    assert touched.exists(), "unhardened, the kernel runs its command"
    touched.unlink()
    return root, touched


def test_an_exported_kernel_loads_runs_and_times_after_harden(kernels):
    root, _ = kernels
    out = run_hardened(f"""
        m = tvm.runtime.load_module("{root}/add_one.so")
        a = tvm.runtime.tensor(np.arange(16, dtype="float32"))
        b = tvm.runtime.tensor(np.zeros(16, dtype="float32"))
        m["main"](a, b)
        assert (b.numpy() == np.arange(16) + 1).all()
        print(m.time_evaluator("main", tvm.cpu(), number=100, repeat=3)(a, b).mean)
    """, imports="import numpy as np, tvm")
    assert float(out.split()[-1]) > 0


def test_tvm_jit_compiles_and_runs_a_parallel_kernel_after_harden():
    out = run_hardened("""
        from tvm import te
        A = te.placeholder((4096,), name="A")
        B = te.compute((4096,), lambda i: A[i] * 2, name="B")
        sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([A, B])}))
        outer, _ = sch.split(sch.get_loops(sch.get_sblock("B"))[0], factors=[4, None])
        sch.parallel(outer)  # TVM starts its thread pool now, after harden
        ex = tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 2}))
        a = tvm.runtime.tensor(np.ones(4096, dtype="float32"))
        b = tvm.runtime.tensor(np.zeros(4096, dtype="float32"))
        ex["main"](a, b)
        print(float(b.numpy().sum()), len(os.listdir("/proc/self/task")))
    """, imports="import numpy as np, tvm", env={"TVM_NUM_THREADS": "2"})
    total, threads = out.split()[-2:]
    assert float(total) == 8192.0 and int(threads) >= 2


def test_a_kernel_calling_system_cannot_run_a_command(kernels):
    require("seccomp")
    root, touched = kernels
    out = run_hardened(f"""
        m = tvm.runtime.load_module("{root}/calls_system.so")
        status = tvm.runtime.tensor(np.zeros(1, dtype="int32"))
        m["main"](status)
        print(int(status.numpy()[0]))
    """, imports="import numpy as np, tvm")
    assert int(out.split()[-1]) != 0  # system() reports the failure...
    assert not touched.exists()  # ...and nothing ran
