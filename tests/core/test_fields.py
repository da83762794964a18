"""Every config checks each field against the range and choices its metadata writes, naming it."""

import dataclasses
import typing

import pytest

from dragonlab.core.errors import InputError
from dragonlab.core.fields import check, field_type
from dragonlab.evaluation.config import EvalConfig
from dragonlab.learn.dataset_config import DatasetConfig
from dragonlab.learn.rl import RLConfig
from dragonlab.learn.sft import SFTConfig
from dragonlab.reporting.config import ReportConfig
from dragonlab.search.config import CollectConfig, MeasureConfig

CONFIGS = [CollectConfig, MeasureConfig, EvalConfig, SFTConfig, RLConfig, DatasetConfig, ReportConfig]
OUTSIDE = {"> 0": 0, ">= 0": -1, "(0, 1)": 1.0, "[0, 1)": 1.0}  # a value just outside each range


def bad_values(cls):
    """(field, a value it must refuse) for every field whose metadata says what it takes."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, many = field_type(hints[f.name])
        if "range" in f.metadata:
            value = OUTSIDE[f.metadata["range"]]
            yield f.name, (value,) if many else value
            if kind is int and not many:
                yield f.name, 2.5  # not an integer
                yield f.name, True  # a bool is no number here
        if isinstance(f.metadata.get("choices"), tuple):
            yield f.name, "bogus"


CASES = [(cls, name, value) for cls in CONFIGS for name, value in bad_values(cls)]


def test_every_config_has_fields_to_check():
    assert all(any(c is cls for c, _, _ in CASES) for cls in CONFIGS)
    assert len(CASES) > 60


@pytest.mark.parametrize("cls, name, value", CASES, ids=[f"{c.__name__}.{n}={v!r}" for c, n, v in CASES])
def test_a_value_outside_its_field_is_refused_naming_class_and_field(cls, name, value):
    with pytest.raises(InputError, match=rf"^{cls.__name__}\.{name} must be .*, got {value!r}".replace("(", r"\(")
                       .replace(")", r"\)")):
        cls(**{name: value})


def test_defaults_and_none_where_the_type_allows_it_pass():
    for cls in CONFIGS:
        check(cls())
    assert SFTConfig(max_steps=None, learning_rate=None).max_steps is None
    assert CollectConfig(search_threads=2).search_threads == 2 and CollectConfig(search_threads="physical")
    assert ReportConfig(budgets=(8, 16), p=(1.0, 1.5)).budgets == (8, 16)
    assert MeasureConfig(run_timeout_sec=5).run_timeout_sec == 5  # an int where a float is asked


def test_messages_say_what_the_value_must_be():
    with pytest.raises(InputError, match=r"^CollectConfig\.trials must be a positive integer, got 0$"):
        CollectConfig(trials=0)
    with pytest.raises(InputError, match=r"^EvalConfig\.timeout_sec must be a positive finite number, got nan$"):
        EvalConfig(timeout_sec=float("nan"))
    with pytest.raises(InputError, match=r"^CollectConfig\.runner must be one of local, rpc, got 'ssh'$"):
        CollectConfig(runner="ssh")
    with pytest.raises(InputError, match=r"^ReportConfig\.budgets must be a non-empty tuple, each a positive integer, "
                                         r"got \(8, 0\)$"):
        ReportConfig(budgets=(8, 0))
    with pytest.raises(InputError, match=r"^ReportConfig\.budgets must be a non-empty tuple, .*, got \(\)$"):
        ReportConfig(budgets=())
