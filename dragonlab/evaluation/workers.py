"""Worker processes for untrusted work: hard time limits, memory limits, crash reports.

A script from a model can crash the process that applies it (a zero tile factor raises SIGFPE
inside TVM), hang in a kernel, or allocate without bound. Each `Worker` is a long-lived child
process (reused for throughput) that runs one call at a time. The limits are enforced from the
outside: the parent waits on the pipe with a deadline and kills the child when it passes, so a
kernel spinning in C++ with the GIL held cannot stall the parent (TVM's own PopenWorker relies
on a timer thread inside the child). The memory limit is RLIMIT_AS in the child.

The child answers with JSON, never with pickles: a process that ran untrusted work (a kernel
that might, against every check before it, execute code of its own) can send wrong data, which
the caller checks, but cannot make the parent construct objects or run code. Calls still go to
the child as pickles (the parent is trusted). A `sandbox` worker also hardens itself at start
(`dragonlab.evaluation.sandbox`: no new processes, files or sockets) before it takes any call.

A call may report progress (`progress("build")`) before it returns, so that a crash or a
timeout can be attributed to the stage it happened in.

Starting an interpreter that imports TVM costs seconds of CPU (about 1.6 s on a 2-core EPYC), and
an evaluator starts several workers, again after every crash or timeout. On Linux a worker is
therefore forked from a *zygote*: a process of its own that imported numpy and TVM once and
runs nothing else (it never runs a call: forking it is safe). A zygote serves the workers of
one environment while any of them is open, and for `LINGER_SEC` after the last one closed (the
next evaluator forks from it); it reaps their exits and reports them; a forked worker then
limits and hardens itself exactly as a fresh one does. Elsewhere each worker is a fresh
interpreter.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable


class WorkerError(Exception):
    """The call did not return: it timed out, or the process died. `.stage` is the last
    progress the call reported."""

    def __init__(self, message: str, stage: str | None):
        super().__init__(message)
        self.stage = stage


class WorkerTimeout(WorkerError):
    pass


class WorkerCrashed(WorkerError):
    pass


class RemoteError(Exception):
    """The call raised; the message is the remote exception's type and text, `.stage` the last
    progress the call reported."""

    def __init__(self, message: str, stage: str | None = None):
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class Limits:
    timeout_sec: float = 60.0  # one call
    memory_bytes: int | None = 8 << 30
    setup_sec: float = 600.0  # the setup call of a fresh worker (imports can take a minute on a busy machine)


MAX_MESSAGE = 64 << 20  # bytes of one answer: results are verdicts and short lists, never tensors


def _send(outbox: Connection, kind: str, value) -> None:
    try:
        data = json.dumps([kind, value])
    except (TypeError, ValueError):
        data = json.dumps(["error", f"TypeError: the call returned a {type(value).__name__}, not JSON data"])
    outbox.send_bytes(data.encode())


def _serve(inbox: Connection, outbox: Connection, memory_bytes: int, sandbox: bool) -> None:
    """The child's loop: receive (function, args), send progress and then the result."""
    # Ctrl-C (or a notebook kernel's interrupt, sent to its process group) is for the parent: it
    # decides what becomes of a call, and ends its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if sandbox:
        import numpy  # noqa: F401  (what kernel workers need, imported before the doors close)
        import tvm  # noqa: F401

        from dragonlab.evaluation.sandbox import harden

        harden()

    def progress(stage: str) -> None:
        _send(outbox, "progress", stage)

    while True:
        try:
            fn, args = inbox.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        try:
            answer = ("result", fn(*args, progress=progress))
        except MemoryError:
            answer = ("error", "MemoryError: out of memory (worker limit)")
        except Exception as e:  # everything the call raises goes back as data
            answer = ("error", f"{type(e).__name__}: {e}")
        try:
            _send(outbox, *answer)
        except OSError:
            return  # the parent is gone (an interrupted run): nobody to answer


class Worker:
    """One child process; `call` runs `fn(*args, progress=...)` in it under the limits."""

    def __init__(self, limits: Limits = Limits(), setup: tuple[Callable, tuple] | None = None, *,
                 sandbox: bool = False, env: dict[str, str] | None = None):
        """`setup` runs once in each fresh process, under `limits.setup_sec`, before any call:
        slow one-off work (imports, caches) must not eat into a call's time limit. `sandbox`:
        the process hardens itself before its first call (for workers that run kernels). `env`:
        variables set in the process's environment over those it inherits."""
        self.limits = limits
        self.setup = setup
        self.sandbox = sandbox
        self.env = env
        self._proc: subprocess.Popen | None = None
        self._zygote: _Zygote | None = None  # the one it forks from, while it uses one
        self._inbox = self._outbox = None

    def _start(self) -> None:
        # Forked from a zygote, or a fresh interpreter running this module (never forked from the
        # caller: TVM and torch hold threads and locks there; not multiprocessing's spawn: it
        # re-imports the caller's __main__ script).
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        try:
            if ZYGOTES:
                env = {**os.environ, **(self.env or {})}
                for retry in (False, True):  # a zygote that died (killed from outside) is replaced once
                    try:
                        self._zygote = _acquire(env, self._zygote)
                        self._proc = self._zygote.spawn(
                            from_parent, to_parent, self.limits.memory_bytes or 0, self.sandbox,
                            {k: env.get(k) for k in SET_AFTER_FORK}, self.limits.setup_sec)
                        break
                    except ZygoteGone as e:
                        if retry:
                            raise WorkerCrashed(f"no worker: its zygote is gone ({e})", None) from None
            else:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "dragonlab.evaluation.workers", str(from_parent), str(to_parent),
                     str(self.limits.memory_bytes or 0), "sandbox" if self.sandbox else "plain"],
                    pass_fds=(from_parent, to_parent), stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env} if self.env else None)
        except BaseException:
            os.close(to_child)
            os.close(from_child)
            raise
        finally:
            os.close(from_parent)
            os.close(to_parent)
        self._outbox = Connection(to_child, readable=False)
        self._inbox = Connection(from_child, writable=False)

    def call(self, fn: Callable, *args, timeout_sec: float | None = None) -> Any:
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._start()
            if self.setup:
                self._call(self.setup[0], self.setup[1], self.limits.setup_sec)
        return self._call(fn, args, timeout_sec or self.limits.timeout_sec)

    def _call(self, fn: Callable, args: tuple, timeout: float) -> Any:
        try:
            self._outbox.send((fn, args))
        except (OSError, ValueError):
            code = self._reap()
            raise WorkerCrashed(f"worker died ({_describe_exit(code)})", None) from None
        deadline = time.monotonic() + timeout
        stage = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise WorkerTimeout(f"timed out after {timeout:g} s", stage)
            try:
                # Short waits: a Ctrl-C that reaches another thread is acted on between them.
                if not self._inbox.poll(min(left, 0.25)):
                    continue
                kind, value = _message(self._inbox.recv_bytes(MAX_MESSAGE))
            except (EOFError, OSError, ConnectionError):
                code = self._reap()
                raise WorkerCrashed(f"worker died ({_describe_exit(code)})", stage) from None
            except ValueError as e:  # not the protocol: the process cannot be trusted to go on
                self._kill()
                raise WorkerCrashed(f"worker sent malformed data ({e})", stage) from None
            if kind == "progress":
                stage = value
            elif kind == "result":
                return value
            else:
                raise RemoteError(value, stage)

    def _reap(self) -> int | None:
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._kill()
        return code

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._inbox.close()
            self._outbox.close()
        self._proc = self._inbox = self._outbox = None

    def interrupt(self) -> None:
        """End the call in flight from another thread (it raises WorkerCrashed in its caller's)."""
        proc = self._proc
        if proc is not None:  # kill() itself skips a process known to have ended
            proc.kill()

    def close(self) -> None:
        self._kill()
        with _zygotes_lock:
            _release_locked(self._zygote)
        self._zygote = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None


# Forking from a zygote needs fork and SCM_RIGHTS, and is safe where a forked child may go on
# running Python: Linux (macOS forbids it once some system frameworks are loaded).
ZYGOTES = sys.platform.startswith("linux") and os.environ.get("DRAGONLAB_ZYGOTES", "1") != "0"

# TVM's runtime reads these when it makes its thread pool, at a process's first parallel
# kernel, never at import: a forked worker sets them itself, so that workers that differ only
# in them (the evaluator's checking and timing workers) share a zygote. pytest names the
# running test in the last one: evaluators of successive tests share a zygote too.
SET_AFTER_FORK = ("TVM_NUM_THREADS", "TVM_THREAD_POOL_SPIN_COUNT", "PYTEST_CURRENT_TEST")

LOST = 256  # the exit status of a forked worker whose zygote is gone (no real status is 256)

# How long a zygote with no worker left waits for another (its imports are 1.6 s of CPU on a
# 2-core EPYC): a notebook's evaluators, or a test run's, one after another, fork from one zygote
# instead of starting one each (a run of the test suite started 80 zygotes before, 26 with this
# and PYTEST_CURRENT_TEST set after the fork). 0: a zygote ends with its last worker.
LINGER_SEC = 60.0


class ZygoteGone(Exception):
    pass


class _Zygote:
    """The parent's end of a zygote: spawn a worker, wait for one. Thread-safe."""

    def __init__(self, key: tuple):
        env = dict(key)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dragonlab.evaluation.workers", "zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.key = key
        self.users = 0  # Workers that fork from it
        self.idle_since = time.monotonic()  # when the last of them closed

    def request(self, message: list, fds: tuple[int, ...] = (), timeout: float | None = None):
        """Send `message` (JSON) and `fds`, return the zygote's answer. `timeout`: how long the
        zygote itself may take (a wait's limit, its imports before a spawn); None: no limit."""
        with self.lock:
            if self.sock is None:
                raise ZygoteGone("closed")
            try:
                self.sock.settimeout(None if timeout is None else timeout + 30)
                socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))
                answer = self.sock.recv(4096)
            except (OSError, ValueError) as e:  # a timeout too: it would answer out of turn
                self._close()
                raise ZygoteGone(f"{type(e).__name__}: {e}") from None
            if not answer:
                self._close()
                raise ZygoteGone("it exited")
            return json.loads(answer)

    def spawn(self, from_parent: int, to_parent: int, memory_bytes: int, sandbox: bool,
              env: dict[str, str | None], timeout: float) -> "_Forked":
        """A worker running `_serve` on the two pipe ends (the zygote imports first: `timeout`)."""
        pid = self.request(["spawn", memory_bytes, sandbox, env, os.getcwd()], (from_parent, to_parent), timeout)
        return _Forked(self, pid)

    def _close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        with self.lock:
            self._close()


class _Forked:
    """A worker forked by a zygote, with what `Worker` uses of `subprocess.Popen`. The zygote
    reaps it only when asked (`wait`): until then its pid cannot be reused, and `kill` is safe."""

    def __init__(self, zygote: _Zygote, pid: int):
        import psutil

        self.zygote, self.pid, self.returncode = zygote, pid, None
        self.started = psutil.Process(pid).create_time()  # which process the pid names (see _kill_if_ours)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                code = self.zygote.request(["wait", self.pid, timeout])
            except ZygoteGone:
                code = LOST  # reparented to init, which reaps it: its status is lost
                self._kill_if_ours()
            if code is None:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self.returncode = code
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.returncode is None and self.zygote.sock is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _kill_if_ours(self) -> None:
        """With the zygote gone, init reaps the worker and its pid may be reused: kill the
        process only if it is the one forked (a worker spinning in a kernel never reads EOF)."""
        import psutil

        try:
            p = psutil.Process(self.pid)
            if p.create_time() == self.started:
                p.kill()
        except psutil.Error:
            pass


_zygotes: dict[tuple, _Zygote] = {}
_zygotes_lock = threading.Lock()


def _forget_zygotes() -> None:
    """In a child forked from a process with zygotes (a DataLoader worker): they are the
    parent's; this process closes its copies of their sockets and nothing else."""
    global _zygotes_lock
    _zygotes_lock = threading.Lock()  # another thread may have held it at the fork
    for zygote in _zygotes.values():
        if zygote.sock is not None:
            zygote.sock.close()
    _zygotes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_zygotes)


def _acquire(env: dict[str, str], held: _Zygote | None) -> _Zygote:
    """The running zygote of `env` (started if there is none), for a worker that used `held`
    (released if it is another one)."""
    key = tuple(sorted((k, v) for k, v in env.items() if k not in SET_AFTER_FORK))
    with _zygotes_lock:
        zygote = _zygotes.get(key)
        if zygote is None or zygote.sock is None:  # none yet, or gone
            zygote = _zygotes[key] = _Zygote(key)
        if zygote is not held:
            zygote.users += 1
            _release_locked(held)
        return zygote


def _release_locked(zygote: _Zygote | None) -> None:
    """One worker fewer forks from `zygote`; after the last one it waits `LINGER_SEC` for a
    worker of the same environment (the next evaluator of a notebook or a test run), then ends."""
    if zygote is None:
        return
    zygote.users -= 1
    if zygote.users == 0:
        zygote.idle_since = time.monotonic()  # names this idle spell: a later one has another
        if LINGER_SEC > 0 and _zygotes.get(zygote.key) is zygote and zygote.sock is not None:
            timer = threading.Timer(LINGER_SEC, _end_if_still_idle, (zygote, zygote.idle_since))
            timer.daemon = True  # the process may exit meanwhile: the zygote then ends with it
            timer.start()
        else:
            _end_locked(zygote)


def _end_locked(zygote: _Zygote) -> None:
    if _zygotes.get(zygote.key) is zygote:
        del _zygotes[zygote.key]
    zygote.close()


def _end_if_still_idle(zygote: _Zygote, since: float) -> None:
    """End `zygote` if no worker has used it since its idle spell `since` began."""
    with _zygotes_lock:
        if zygote.users == 0 and zygote.idle_since == since:
            _end_locked(zygote)


def zygote_pids() -> list[int]:
    """The zygotes running now: each ends `LINGER_SEC` after the last of its workers."""
    with _zygotes_lock:
        return [z.proc.pid for z in _zygotes.values() if z.proc.poll() is None]


def descendants() -> list:
    """This process's descendants (psutil processes), but the zygotes waiting for the next
    evaluator's workers: what a leak check compares before and after (a worker a zygote forked
    is counted)."""
    import psutil

    waiting = set(zygote_pids())
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in waiting]


def _message(data: bytes) -> tuple[str, object]:
    """A child's message: ["progress", stage], ["result", value] or ["error", text]."""
    try:
        kind, value = json.loads(data)
    except (ValueError, TypeError, RecursionError) as e:
        raise ValueError(f"not a JSON message: {type(e).__name__}") from None
    if kind not in ("progress", "result", "error") or (kind != "result" and not isinstance(value, str)):
        raise ValueError(f"unknown message {str(kind)[:20]!r}")
    return kind, value


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code == LOST:
        return "no exit status: the zygote that forked it is gone"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


class WorkerPool:
    """`n` workers; `map` runs calls in parallel, one thread per worker, results in order."""

    def __init__(self, n: int, limits: Limits = Limits(), setup: tuple[Callable, tuple] | None = None, *,
                 sandbox: bool = False, env: dict[str, str] | None = None):
        self.workers = [Worker(limits, setup, sandbox=sandbox, env=env) for _ in range(max(1, n))]

    def map(self, fn: Callable, argsets: list[tuple], *, timeout_sec: float | None = None,
            on_result: Callable[[int, Any], None] | None = None) -> list:
        """Each result is the call's return value or the WorkerError/RemoteError it raised."""
        results: list = [None] * len(argsets)
        next_index = iter(range(len(argsets)))
        lock = threading.Lock()
        stop = threading.Event()

        def drain(worker: Worker, finished: threading.Event) -> None:
            try:
                while True:
                    with lock:
                        i = None if stop.is_set() else next(next_index, None)
                    if i is None:
                        return
                    try:
                        results[i] = worker.call(fn, *argsets[i], timeout_sec=timeout_sec)
                    except (WorkerError, RemoteError) as e:
                        results[i] = e
                    if on_result:
                        on_result(i, results[i])
            finally:
                finished.set()

        # Each thread says it has finished with an Event, not Thread.join: in Python 3.11 a join
        # that Ctrl-C interrupts marks the thread it waits for as ended while it still runs.
        finished = [threading.Event() for _ in self.workers]
        threads = [threading.Thread(target=drain, args=(w, f), daemon=True) for w, f in zip(self.workers, finished)]
        try:
            for t in threads:
                t.start()
            for f in finished:
                # Waits with a timeout: Ctrl-C may reach another thread of the process, and the
                # main thread only acts on it between waits.
                while not f.wait(0.1):
                    pass
        except BaseException:  # Ctrl-C: no call starts after it, and the ones in flight are ended
            stop.set()
            # A thread without an ident has not begun (it will see `stop` and take no call).
            running = [f for t, f in zip(threads, finished) if t.ident is not None]
            while not all(f.is_set() for f in running):
                for w in self.workers:
                    w.interrupt()
                for f in running:
                    f.wait(0.1)
            raise
        return results

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid]

    def close(self) -> None:
        for w in self.workers:
            w.close()


def _zygote_main(sock: socket.socket) -> None:
    """A zygote's loop: fork a worker for each "spawn", reap one for each "wait"; end when the
    parent closes the socket (or exits). It runs no call itself, and is single-threaded when it
    forks (numpy's OpenBLAS stops its threads around a fork)."""
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, as in a worker
    import numpy  # noqa: F401  (what every worker imports, imported once)
    import tvm  # noqa: F401

    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        except OSError:
            return
        if not data:
            return  # the parent is gone, or closed this zygote
        kind, *args = json.loads(data)
        if kind == "spawn":
            memory_bytes, sandbox, env, cwd = args
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    sock.close()
                    os.chdir(cwd)  # where the parent is now, as a fresh worker would start
                    sys.argv[1:] = [str(fds[0]), str(fds[1]), str(memory_bytes), "sandbox" if sandbox else "plain"]
                    for k, v in env.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                    _serve(Connection(fds[0], writable=False), Connection(fds[1], readable=False), memory_bytes,
                           sandbox)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            answer = pid
        elif kind == "wait":
            answer = _wait(*args)
        else:
            return
        sock.send(json.dumps(answer).encode())


def _wait(pid: int, timeout: float | None) -> int | None:
    """The exit status of the zygote's child `pid` as `Popen.returncode` gives it (-N: signal N),
    reaping it; None if it is still running after `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:
            return LOST
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


if __name__ == "__main__":
    # No worker uses torch, but TVM's FFI imports it whenever it is installed: blocked, a worker
    # starts in a third of the CPU time (1.6 s instead of 5 s) and half the memory (195 MB, not 400 MB).
    sys.modules.setdefault("torch", None)
    if sys.argv[1] == "zygote":
        _zygote_main(socket.socket(fileno=int(sys.argv[2])))
    else:
        _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False),
               int(sys.argv[3]), sys.argv[4] == "sandbox")
