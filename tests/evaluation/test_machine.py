"""A long job resumed on a machine of another speed is refused before it judges anything."""

import json

import pytest

from dragonlab.core.errors import InputError
from dragonlab.evaluation import machine
from dragonlab.evaluation.evaluate import Evaluator


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator("cpu") as ev:
        yield ev


def test_a_job_resumed_on_a_machine_of_another_speed_is_refused(evaluator, tmp_path, monkeypatch):
    path = tmp_path / "machine.jsonl"
    first = machine.check(path, evaluator)  # the first session, timed for real: nothing to compare
    assert first["calibration"] > 0 and "ratio_to_first" not in first
    # Later sessions' readings are given, not timed: beside the other test process a real second
    # reading came out 2.06x the first, which is what the check is for, not what this test is.
    monkeypatch.setattr(machine, "calibrate", lambda ev: first["calibration"] * 1.1)
    again = machine.check(path, evaluator)  # the same machine, a little noise
    assert 1 / machine.TOLERANCE <= again["ratio_to_first"] <= machine.TOLERANCE
    assert len(path.read_text().splitlines()) == 2

    faster = tmp_path / "faster.jsonl"  # a job started where the kernel ran 10x faster
    faster.write_text(json.dumps({**first, "calibration": first["calibration"] / 10}) + "\n")
    before = faster.read_text()
    with pytest.raises(InputError, match=r"ms, \d+\.\d\dx the .* ms of the session that started this job"):
        machine.check(faster, evaluator)
    assert faster.read_text() == before  # nothing appended
    mixed = machine.check(faster, evaluator, other_machine=True)
    assert mixed["ratio_to_first"] > 2 * machine.TOLERANCE and len(faster.read_text().splitlines()) == 2
