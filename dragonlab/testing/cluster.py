"""A TVM RPC tracker and CPU servers on loopback: what the tests (and anyone trying `--runner rpc`
on one machine) measure through."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from dragonlab.search.measure import RunnerUnavailableError, check_tracker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def rpc_cluster(servers: int = 1, key: str = "loopcpu"):
    """A TVM RPC tracker and `servers` CPU servers on loopback, registered under `key`; yields
    the tracker's port. Every process group is killed afterwards."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host=127.0.0.1",
                               f"--port={port}", f"--port-end={port + 1}"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        for _ in range(servers):
            server_port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tvm.exec.rpc_server", f"--tracker=127.0.0.1:{port}", f"--key={key}",
                 "--host=127.0.0.1", f"--port={server_port}", f"--port-end={server_port + 1}"],
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while time.monotonic() < deadline:
            try:
                if check_tracker("127.0.0.1", port, key, timeout_sec=2) == servers:
                    break
            except RunnerUnavailableError:
                pass
            time.sleep(0.5)
        yield port
    finally:
        for p in procs:  # a server's popen worker child holds the port: kill the whole group
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
