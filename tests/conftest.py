"""Fixtures shared by the test modules: real search records, collected once per session;
an RPC tracker with one CPU server on loopback."""

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

# Two test processes share the cores (make test: -n 2): kernels run and are timed on one thread
# each, as the workers' TVM_NUM_THREADS (TargetSpec.kernel_env); on the target's cores, a test that
# compares two timings of microsecond kernels saw them 3x to 290x apart.
os.environ.setdefault("TVM_NUM_THREADS", "1")

from dragonlab.cli import main
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.learn.sft import SFTConfig, SFTRun, train
from dragonlab.search.collect import CollectSummary, collect
from dragonlab.search.config import CollectConfig
from dragonlab.search.records import RecordStore
from dragonlab.testing import trace_corpus
from dragonlab.testing.cluster import rpc_cluster
from dragonlab.testing.shared import once


# `make test` runs two processes (`-n 2 --dist loadfile`), a test file at a time in one of them, so
# that a file's module fixtures are built once. Files named here go to one process together: they
# share the trace corpus (design spaces on llvm and cuda) and TVM's tensor intrinsics, which cost
# about 80 s and 10 s of CPU to make in each process that needs them. (Not xdist's `loadgroup`: with
# pytest 9 its group marks no longer reach the scheduler, and every test is scheduled alone.)
# The notebooks' test resumes the tune tests' run (`tuned`, about 100 s to make on an idle
# machine): in another process it would wait for it on the lock, both processes busy with one run.
SHARED_PROCESS = {path: "corpus" for path in (
    "tests/core/test_codec.py", "tests/learn/test_constrain.py", "tests/cli/test_codec_cli.py",
    "tests/core/test_allowlist.py", "tests/search/test_msdb.py", "tests/evaluation/test_evaluate.py")} | {
    "tests/tune/test_tune.py": "tune", "tests/notebooks/test_notebooks.py": "tune"}


# The longest files first, the rest in xdist's order (most tests first): a process asks for the next
# file when it has two tests left, so a long file near the end leaves the other process idle (one
# run ended 95 s apart, test_serve and test_browser last). Seconds in a `make test` run on a 2-core
# EPYC: corpus 434, tune 287, collect 185, report 170, distributed 113, serve 95, sft 85,
# workers 55, browser 52, benchmarks 46. test_collect goes before the tune group, whose notebook 05
# needs the tiny model: by then the corpus group's test_constrain has trained it.
LONGEST_FIRST = ("corpus", "tests/search/test_collect.py", "tune", "tests/reporting/test_report.py",
                 "tests/learn/test_distributed.py", "tests/learn/test_serve.py", "tests/learn/test_sft.py",
                 "tests/evaluation/test_workers.py", "tests/reporting/test_browser.py", "tests/test_benchmarks.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_PROCESS.get(path, path)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_ordered", False):  # the first call: the queue is complete
                first = [s for s in LONGEST_FIRST if s in self.workqueue]
                for scope in reversed(first):
                    self.workqueue.move_to_end(scope, last=False)
                self._ordered = True
            super()._assign_work_unit(node)

    return SharedFiles(config, log)


@pytest.fixture(scope="session")
def quick():
    """The first quick workload of each family, by family."""
    return first_of_each_family("quick")


@pytest.fixture(scope="session")
def corpus():
    """Design spaces and postprocessed samples of six families on llvm and cuda, tensor cores
    included (dragonlab/testing/trace_corpus.py)."""
    return trace_corpus.build(posts_per_space=1)


@pytest.fixture(scope="session")
def collected(tmp_path_factory, quick):
    """Two quick workloads, 8 trials each in rounds of 4, measured for real (once per run; both
    test processes wait for it early, so its search's population is small, as the demo's)."""
    workloads = [quick["matmul"], quick["softmax"]]

    def make(folder):
        config = CollectConfig(trials=8, trials_per_round=4, population=64)
        return str(folder), dataclasses.asdict(collect(workloads, get_target("cpu"), RecordStore(folder, create=True),
                                                       config, progress=False))

    root, summary = once(tmp_path_factory, "collected", make)
    return Path(root), workloads, CollectSummary(**summary)


@pytest.fixture(scope="session")
def stores(collected, quick, tmp_path_factory):
    """Two real stores: the session's matmul + softmax one, and the first quick reduce_row, 8
    trials in one round (once per run; the family the dataset and benchmark tests hold out)."""
    def make(folder):
        collect([quick["reduce_row"]], get_target("cpu"), RecordStore(folder, create=True),
                CollectConfig(trials=8, trials_per_round=8, population=64), progress=False)
        return str(folder)

    return [collected[0], Path(once(tmp_path_factory, "reduce_row", make))]


@pytest.fixture(scope="session")
def data(collected, tmp_path_factory):
    """The session's matmul + softmax records as 4 examples (one of each task per workload), all in train."""
    def make(folder):
        assert main(["dataset", "build", "--records", str(collected[0]), "--out", str(folder / "ds"), "--top-k", "1",
                     "--pairs-per-workload", "1", "--validation", "0", "--test", "0"]) == 0
        return str(folder / "ds")

    return Path(once(tmp_path_factory, "sft_data", make))


@pytest.fixture(scope="session")
def tiny(data, tmp_path_factory):
    """scratch-tiny trained until it has learned the few examples by heart (once per run), and
    how long that took. (The examples differ from run to run with the records: 100 steps at twice
    the learning rate did not learn every run's.)"""
    def make(folder):
        start = time.monotonic()
        # One example per forward pass (4 accumulated a step): unpadded, the 247-682-token examples
        # trained in 82 s instead of 123 s (alone on the 2-core EPYC), to the same losses.
        config = SFTConfig(preset="scratch-tiny", batch_size=4, micro_batch_size=1, logging_steps=5, save_steps=1000,
                           max_steps=160)
        run = train(data, folder / "run", config, progress=False)
        return {**dataclasses.asdict(run), "out": str(run.out), "model_dir": str(run.model_dir)}, \
            time.monotonic() - start

    run, seconds = once(tmp_path_factory, "sft_tiny", make)
    return SFTRun(**{**run, "out": Path(run["out"]), "model_dir": Path(run["model_dir"])}), seconds


TUNE_NETWORK = "tests/tune/networks.py:residual_mlp"
TUNE_FLAGS = ["--attempts", "1", "--budget", "8", "--population", "64", "--checks", "2"]


@pytest.fixture(scope="session")
def tuned(tiny, tmp_path_factory):
    """`dragonlab tune` on the test network with the tiny model: one attempt per task,
    MetaSchedule at 1 and 2 trials per task (once per run). The notebook test resumes it."""
    def make(folder):
        out = folder / "run"
        assert main(["tune", "--model", TUNE_NETWORK, "--dragon", str(tiny[0].model_dir), "--out", str(out),
                     *TUNE_FLAGS]) == 0
        return str(out)

    return Path(once(tmp_path_factory, "tuned", make))


@pytest.fixture(scope="module")
def rpc_tracker():
    """A tracker and one CPU server on loopback, shared by a file's tests (a server takes about
    15 s to start and register)."""
    with rpc_cluster(1) as port:
        yield port


@pytest.fixture(scope="session")
def notebook_kernel() -> str:
    """`python3`, checked to start this interpreter: jupyter_client runs a kernelspec whose argv
    begins with plain "python" on sys.executable, and the venv's own spec comes first."""
    from jupyter_client.kernelspec import KernelSpecManager

    argv = KernelSpecManager().get_kernel_spec("python3").argv
    assert argv[0] in ("python", "python3", sys.executable), \
        f"the python3 kernel runs {argv[0]}, not this venv; register one: python -m ipykernel install --sys-prefix"
    return "python3"
