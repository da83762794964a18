"""TVM's tensor intrinsics (`tvm.s_tir.tensor_intrin`), imported at a fraction of the cost.

A tensorize instruction names an intrinsic that only that module registers, and MetaSchedule's
`TuneContext` imports it for every target. Importing it parses a few hundred TVMScript
functions, and each `T.prim_func` calls `inspect.stack()`, which reads the source line of every
frame on the stack; for a frame whose file is not on disk (TVMScript's `<ast>`, frozen
importlib), `inspect` scans every loaded module to find it. So the import's cost grows with the
modules a process has loaded. Measured on a 2-core machine with a collection running beside it:
82 s in a process that had loaded torch, transformers, datasets, trl and plotly (4,508 modules),
against 10 s with the stack below; inside the test suite, about 6 minutes.

TVMScript reads the frames themselves (for the names a function captures) and the source line
of the third frame (to tell a function in a class body), nothing further. `load()` lends
`inspect` a stack that reads source lines for the first three frames only, for the length of the
import, and is a no-op once the module is loaded.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

MODULE = "tvm.s_tir.tensor_intrin"
_LINES_READ = 3  # frames whose source line TVMScript may read: its own, its caller's, and the one above
_lock = threading.Lock()


def load() -> None:
    """Import `tvm.s_tir.tensor_intrin` (every tensor intrinsic TVM defines), cheaply."""
    if MODULE in sys.modules:
        return
    with _lock:
        if MODULE in sys.modules:
            return
        original = inspect.stack
        inspect.stack = _stack
        try:
            __import__(MODULE)
        finally:
            inspect.stack = original


@contextlib.contextmanager
def for_target(target) -> Iterator[None]:
    """What MetaSchedule needs of the intrinsics for `target` (a TVM Target), while the block runs.
    Each `TuneContext` imports every tensor intrinsic first; MetaSchedule's rules for an llvm
    target that names no CPU or features (`plain_llvm`) tensorize nothing, so for such a target
    the module is stood in for: a fresh process saves the import altogether (tests/evaluation/
    test_evaluate.py checks that the design spaces and postprocessors are the same). Other
    targets import it (`load`)."""
    stand_in = types.ModuleType(MODULE) if MODULE not in sys.modules and plain_llvm(target) else None
    if stand_in is None:
        load()
        yield
        return
    sys.modules[MODULE] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(MODULE) is stand_in:
            del sys.modules[MODULE]


def plain_llvm(target) -> bool:
    """Whether MetaSchedule's plain "llvm" rules and postprocessors serve `target` (a TVM
    Target): an x86 llvm target that names no CPU or features, so nothing is tensorized (other
    CPUs get rules of their own, ARM's with dot-product intrinsics)."""
    config = target.export()
    return config.get("kind") == "llvm" and not {"mcpu", "mattr"} & set(config) \
        and config.get("mtriple", "x86_64").startswith("x86_64")


def retrying(call: Callable[[], T]) -> T:
    """`call()`, and once more after `load()` if it failed for want of a tensor intrinsic (a
    tensorize in a trace names one that only TVM's module registers): the import is paid only by
    what needs it."""
    try:
        return call()
    except Exception as e:
        if "TensorIntrin" not in str(e) or MODULE in sys.modules:
            raise
    load()
    return call()


def _stack(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack(context)` that reads source lines of the innermost frames only."""
    frame, infos = sys._getframe(1), []
    while frame is not None:
        if len(infos) < _LINES_READ:
            infos.append(inspect.FrameInfo(frame, *inspect.getframeinfo(frame, context)))
        else:
            code = frame.f_code
            infos.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
        frame = frame.f_back
    return infos
