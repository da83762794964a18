"""Run directories: a rerun resumes only the run it claimed."""

import json
from dataclasses import dataclass

import pytest

from dragonlab.core.errors import InputError
from dragonlab.core.rundir import claim


@dataclass(frozen=True)
class Config:
    steps: int = 10
    subset: int | None = None  # a field that a newer version added


def test_a_rerun_resumes_with_the_same_config_and_refuses_another(tmp_path):
    claim(tmp_path / "run", Config(), tmp_path)
    claim(tmp_path / "run", Config(), tmp_path)  # the same: a resume
    with pytest.raises(InputError, match=r"config.steps: 10 -> 20"):
        claim(tmp_path / "run", Config(steps=20), tmp_path)


def test_a_field_added_since_the_run_began_resumes_at_its_default_only(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"config": {"steps": 10}, "data": str(tmp_path.resolve())}))
    claim(run, Config(), tmp_path)
    with pytest.raises(InputError, match=r"config.subset: None -> 30"):
        claim(run, Config(subset=30), tmp_path)
    assert json.loads((run / "run.json").read_text())["config"] == {"steps": 10}  # nothing rewritten


def test_a_run_is_resumed_only_with_what_fixed_it_and_an_older_run_json_lacks_nothing(tmp_path):
    out = tmp_path / "run"
    claim(out, Config(), tmp_path, digests={"rl": "abc"})
    claim(out, Config(), tmp_path, digests={"rl": "abc"})  # the same: a resume
    with pytest.raises(InputError, match=r"digests\.rl: 'abc' -> 'abd'"):
        claim(out, Config(), tmp_path, digests={"rl": "abd"})
    older = tmp_path / "older"
    claim(older, Config(), tmp_path)  # written before digests were recorded
    claim(older, Config(), tmp_path, digests={"rl": "abd"})


@dataclass(frozen=True)
class Timing:
    repeat: int = 3
    retries: int = 2  # added since


@dataclass(frozen=True)
class Nested:
    steps: int = 10
    timing: Timing = Timing()


def test_a_nested_config_and_its_fields_added_since_resume_at_their_defaults(tmp_path):
    """A run.json written before a nested config (or one of its fields) existed: its defaults."""
    for written in ({"steps": 10}, {"steps": 10, "timing": {"repeat": 3}}):
        run = tmp_path / f"run{len(written)}"
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"config": written, "data": str(tmp_path.resolve())}))
        claim(run, Nested(), tmp_path)
        with pytest.raises(InputError, match=r"config.timing.retries: 2 -> 5"):
            claim(run, Nested(timing=Timing(retries=5)), tmp_path)
