"""A TVM RPC tracker and CPU servers on loopback: what the tests (and anyone trying `--runner rpc`
on one machine) measure through."""

import contextlib
import socket
import time

from dragonlab.search.measure import RunnerUnavailableError, check_tracker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rpc_cluster(servers: int = 1, key: str = "loopcpu"):
    """A TVM RPC tracker and `servers` CPU servers on loopback, registered under `key`; yields
    the tracker's port. TVM's own `Tracker` and `Server` run each in one worker process (its
    `tvm.exec` commands import TVM twice: once to start the worker), the servers started side by
    side; every worker and its children are killed afterwards."""
    from concurrent.futures import ThreadPoolExecutor

    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    tracker, started = None, []
    try:
        port = free_port()
        tracker = Tracker("127.0.0.1", port=port, port_end=port + 1, silent=True)

        def server(_):
            server_port = free_port()
            started.append(rpc.Server("127.0.0.1", port=server_port, port_end=server_port + 1, key=key,
                                      tracker_addr=("127.0.0.1", tracker.port), silent=True))

        with ThreadPoolExecutor(servers) as pool:
            list(pool.map(server, range(servers)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if check_tracker("127.0.0.1", tracker.port, key, timeout_sec=2) == servers:
                    break
            except RunnerUnavailableError:
                pass
            time.sleep(0.1)
        yield tracker.port
    finally:
        for worker in [tracker, *started]:  # a server's forked session children hold its port: killed with it
            if worker is not None:
                worker.terminate()
