"""`transformers serve` on loopback for the tests: a real OpenAI-compatible server of one local
model directory, offline, killed with its whole process group however the test ends."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from dragonlab.testing.browser import tail
from dragonlab.testing.cluster import free_port

# Loopback needs no proxy, whatever the environment says.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Served:
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str  # the name requests must give: the directory, as the server was told it
    log: Path  # the server's stdout and stderr
    started_sec: float  # from launch until /health answered (the model is loaded before that)


def require_serve_group() -> None:
    """Skip, saying why, when `transformers serve`'s own dependencies are missing."""
    for name in ("fastapi", "uvicorn", "openai"):
        pytest.importorskip(name, reason=f"`transformers serve` needs {name}: install the serve group "
                                         "(pip install -e '.[serve]', or make install)")


@contextlib.contextmanager
def serving(model_dir: str | os.PathLike, log: str | os.PathLike, *, timeout_sec: float = 180.0):
    """Serve `model_dir` with `transformers serve` on a free loopback port; yield a `Served` once
    /health answers. The server runs in its own session with one torch thread, offline, and its
    process group is killed on the way out, the test's failure included."""
    require_serve_group()
    model, log, port = str(model_dir), Path(log), free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "TQDM_DISABLE": "1"}
    start = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", model,
                                 "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level", "info"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve {model} exited with status {proc.returncode}:\n{tail(log)}")
            if time.monotonic() - start > timeout_sec:
                raise TimeoutError(f"transformers serve {model}: no answer on {base}/health after "
                                   f"{timeout_sec:.0f} s:\n{tail(log)}")
            try:
                with _DIRECT.open(f"{base}/health", timeout=2) as response:
                    if json.loads(response.read()).get("status") == "ok":
                        break
            except (OSError, ValueError):
                time.sleep(0.25)
        yield Served(f"{base}/v1", model, log, time.monotonic() - start)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
