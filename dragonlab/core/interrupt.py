"""Ctrl-C during MetaSchedule search: stop at the next safe point, not inside TVM.

MetaSchedule calls back into Python for the builder, the runner and the cost model. A
`KeyboardInterrupt` raised inside such a callback either crosses TVM's FFI as a bare
`RuntimeError` (which a loop that survives one broken workload takes for a failure, and goes on)
or ends in `std::terminate` and a segfault. Under `watch_interrupts()` the first SIGINT only
sets a flag; the loop calls `check()` where stopping is safe. A second SIGINT raises at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


@dataclass
class InterruptWatch:
    requested: bool = False  # SIGINT arrived while the watch was on

    def check(self) -> None:
        """Raise KeyboardInterrupt if SIGINT arrived."""
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def watch_interrupts(message: str = "stopping at the next safe point (Ctrl-C again to stop at once)"
                     ) -> Iterator[InterruptWatch]:
    """Within the block, the first SIGINT sets `requested` and prints `message`; the second raises."""
    watch = InterruptWatch()
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield watch
        return

    def on_sigint(signum, frame):
        if watch.requested:
            raise KeyboardInterrupt
        watch.requested = True
        print(f"\ndragonlab: {message}", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield watch
    finally:
        signal.signal(signal.SIGINT, previous)
