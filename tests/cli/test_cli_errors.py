"""Bad input to the CLI ends in one clear error line naming the file (and line or field), a
non-zero exit status and nothing overwritten: never a traceback."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dragonlab.cli import main
from dragonlab.core.jsonl import append_lines
from dragonlab.core.workloads import suite
from dragonlab.learn.dataset import COLUMNS
from dragonlab.search.records import OK, Record, RecordStore

TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]]], []]


def _snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dragonlab: error: "), err
    return err[0]


@pytest.mark.parametrize("line, message", [
    ('{"workload": [1], "target": "cpu", "trace": [[], []], "status": "failed"}',
     r"records\.jsonl:2: field 'workload' must be a string, got an array"),
    ('{"workload": "1", "target": 5, "trace": [[], []], "status": "failed"}',
     r"records\.jsonl:2: field 'target' must be a string, got an integer"),
    ("[" * 100000 + "]" * 100000, r"records\.jsonl:2: not JSON \(nested too deeply\)"),
    ('{"workload": "1", "target": "cpu", "trace": [[], []], "status": "ok", "latencies": [true]}',
     r"records\.jsonl:2: field 'latencies' must hold positive finite seconds"),
])
def test_records_stats_names_file_line_and_field_of_a_bad_record(tmp_path, capsys, line, message):
    store = RecordStore(tmp_path / "store", create=True)
    store.append([Record("1", "cpu", TRACE, OK, (1e-3,))])
    with open(store.root / "records.jsonl", "a") as f:
        f.write(line + "\n")
    before = _snapshot(tmp_path)
    assert main(["records", "stats", str(store.root)]) == 2
    assert re.search(message, _one_error(capsys))
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_collect_refuses_a_timeout_that_is_not_a_positive_finite_number(tmp_path, value):
    out = tmp_path / "store"
    run = subprocess.run([sys.executable, "-m", "dragonlab.cli", "collect", "--out", str(out), f"--timeout={value}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (f"dragonlab collect: error: argument --timeout: expected a "
                                                   f"positive finite number, got {value!r}")
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["attempts", "--model", "m", "--data", "d", "--out", "o", "--temperature", "nan"],
    ["rl", "--from", "s", "--data", "d", "--out", "o", "--beta", "-0.1"],
    ["rl", "--from", "s", "--data", "d", "--out", "o", "--temperature", "0"],
    ["rl", "--from", "s", "--data", "d", "--out", "o", "--bonus-weight", "nan"],
    ["sft", "--data", "d", "--out", "o", "--learning-rate", "inf"],
    ["report", "--run", "r", "--temperature", "-1"],
])
def test_float_options_refuse_nan_inf_and_out_of_range_values_at_parsing(capsys, args):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert f"error: argument {args[-2]}: expected a " in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--run", "--reward"])
def test_a_flag_is_written_in_full(capsys, flag):
    """`--run -0.5` was read as `--runner -0.5` (argparse's abbreviations): a flag that is not the
    command's is refused, whatever flag it begins."""
    with pytest.raises(SystemExit) as exit_:
        main(["rl", "--from", "s", "--data", "d", "--out", "o", flag, "-0.5"])
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {flag} -0.5" in capsys.readouterr().err


def test_the_reward_ladder_is_set_by_its_own_flags():
    from dragonlab.cli.app import build_parser
    from dragonlab.cli.options import config_from
    from dragonlab.evaluation.reward import RewardConfig

    argv = ["rl", "--from", "s", "--data", "d", "--out", "o", "--reward-run", "-0.5", "--reward-check", "-0.1"]
    args = build_parser(argv).parse_args(argv)
    assert config_from(RewardConfig, args) == RewardConfig(run=-0.5, check=-0.1)
    assert args.run.__name__ == "rl"  # the command's own `run` is left alone


@pytest.mark.parametrize("command", [["attempts", "--model", "m"], ["compare", "--a", "a", "--b", "b"]])
def test_per_workload_refuses_a_negative_count_before_loading_anything(tmp_path, capsys, command):
    out = tmp_path / "out"
    assert main([*command, "--data", str(tmp_path / "missing"), "--out", str(out), "--per-workload", "-1"]) == 2
    assert "--per-workload must be non-negative, got -1" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("flags, error", [
    (["--per-workload", "2", "--draws", "0"], "--draws must be positive, got 0"),
    (["--draws", "-1"], "--draws must be positive, got -1"),
])
def test_compare_refuses_draws_it_cannot_take(tmp_path, capsys, flags, error):
    out = tmp_path / "out"
    assert main(["compare", "--a", "a", "--b", "b", "--data", str(tmp_path / "missing"), "--out", str(out),
                 *flags]) == 2
    assert error in capsys.readouterr().err
    assert not out.exists()


def _dataset(path: Path) -> Path:
    """A dataset directory `dataset.load` accepts: one construction example of one workload."""
    import datasets
    from datasets import Dataset, DatasetDict, Features, Value

    w = suite("quick")[0]
    row = {c: None for c in COLUMNS} | {"task": "construction", "prompt": "p", "completion": "", "workload": w.key,
                                        "name": w.name, "family": w.family, "target": "cpu", "rank": 0}
    features = Features({name: Value(kind) for name, kind in COLUMNS.items()})
    datasets.disable_progress_bars()
    DatasetDict({"train": Dataset.from_list([row], features=features)}).save_to_disk(str(path))
    append_lines(path / "workloads.jsonl", [w.to_json()])
    return path


@pytest.mark.parametrize("name, text, message", [
    ("train/state.json", '{"_data_files": [', r"train/state\.json: not JSON"),
    ("train/dataset_info.json", "[" * 100000, r"train/dataset_info\.json: not JSON \(nested too deeply\)"),
    ("dataset_dict.json", '{"splits": "train"}', r"dataset_dict\.json: field splits: expected a list"),
    ("train/state.json", "{}", r"ds: not a readable dataset \(KeyError"),
])
def test_a_corrupt_dataset_file_is_named(tmp_path, capsys, name, text, message):
    ds = _dataset(tmp_path / "ds")
    (ds / name).write_text(text)
    before = _snapshot(tmp_path)
    assert main(["dataset", "stats", str(ds)]) == 2
    assert re.search(message, _one_error(capsys))
    assert main(["sft", "--preset", "scratch-tiny", "--data", str(ds), "--out", str(tmp_path / "run")]) == 2
    assert re.search(message, _one_error(capsys))
    assert _snapshot(tmp_path) == before and not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, message", [
    ('{"config": {"preset": ', r"run/run\.json: not JSON \(Expecting value at column 23\)"),
    ("[1, 2]", r"run/run\.json: not a dragonlab run\.json"),
])
def test_a_corrupt_run_json_is_named_and_kept(tmp_path, capsys, text, message):
    ds = _dataset(tmp_path / "ds")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(text)
    before = _snapshot(tmp_path)
    assert main(["sft", "--preset", "scratch-tiny", "--data", str(ds), "--out", str(tmp_path / "run")]) == 2
    assert re.search(message, _one_error(capsys))
    assert _snapshot(tmp_path) == before
