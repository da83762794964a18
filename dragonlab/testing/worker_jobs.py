"""Functions that tests run inside dragonlab worker processes (importable there by name)."""

import os
import signal
import time


def echo(x, *, progress):
    progress("echo")
    return x


def sleep(seconds, *, progress):
    progress("sleeping")
    time.sleep(seconds)
    return seconds


def spin(*, progress):
    progress("spinning")
    while True:  # a kernel that never returns, GIL held
        pass


def sleep_and_mark(path, seconds, *, progress):
    """Sleep, then append a line to `path`: a trace of every call that ran to its end."""
    progress("sleeping")
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write("done\n")
    return seconds


def crash(*, progress):
    progress("about to crash")
    os.kill(os.getpid(), signal.SIGSEGV)


def allocate(gigabytes, *, progress):
    progress("allocating")
    return len(bytearray(int(gigabytes * (1 << 30))))


def fail(*, progress):
    raise ValueError("bad input at line 3")


def return_object(*, progress):
    return {1, 2}  # a set: not JSON data


class _Payload:
    """Unpickling this runs `touch marker` in whoever unpickles it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def forge_pickled_result(marker, *, progress):
    """What a kernel that ran code in its worker could do: write its own answer to the worker's
    pipe to the parent (fd in argv[2]), framed as multiprocessing does, as a pickle."""
    import pickle
    import struct
    import sys

    payload = pickle.dumps(("result", _Payload(marker)))
    os.write(int(sys.argv[2]), struct.pack("!i", len(payload)) + payload)
    time.sleep(60)


def tvm_threads(*, progress):
    """The size of TVM's runtime thread pool in this process (what a parallel kernel runs on)."""
    import tvm  # noqa: F401  (registers the runtime's functions)
    import tvm_ffi

    progress("threads")
    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


def sandbox_state(*, progress):
    """What confines this process: seccomp mode, no_new_privs, and its user and network namespaces."""
    fields = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return {"seccomp": int(fields["Seccomp"]), "no_new_privs": int(fields["NoNewPrivs"]),
            "userns": os.readlink("/proc/self/ns/user"), "netns": os.readlink("/proc/self/ns/net")}
