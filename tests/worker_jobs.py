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


def crash(*, progress):
    progress("about to crash")
    os.kill(os.getpid(), signal.SIGSEGV)


def allocate(gigabytes, *, progress):
    progress("allocating")
    return len(bytearray(int(gigabytes * (1 << 30))))


def fail(*, progress):
    raise ValueError("bad input at line 3")
