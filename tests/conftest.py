"""Fixtures shared by the test modules: real search records, collected once per session."""

import pytest

from dragonlab.collect import CollectConfig, collect
from dragonlab.records import RecordStore
from dragonlab.targets import get_target
from dragonlab.workloads import suite


@pytest.fixture(scope="session")
def quick():
    """The quick suite by family (one workload per family)."""
    return {w.family: w for w in reversed(suite("quick"))}  # first of each family


@pytest.fixture(scope="session")
def collected(tmp_path_factory, quick):
    """Two quick workloads, 8 trials each in rounds of 4, measured for real."""
    root = tmp_path_factory.mktemp("collected")
    workloads = [quick["matmul"], quick["softmax"]]
    summary = collect(workloads, get_target("cpu"), RecordStore(root, create=True),
                      CollectConfig(trials=8, trials_per_round=4), progress=False)
    return root, workloads, summary
