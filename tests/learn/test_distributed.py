"""Training on several processes: `accelerate launch` with configs/accelerate/cpu-ddp.yaml runs
SFT and GRPO as DDP over gloo on this CPU. Batch sizes are global, so two processes train
as one does; only the main process writes the run directory; a killed run resumes."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dragonlab.learn.sft import read_log

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
              str(ROOT / "configs" / "accelerate" / "cpu-ddp.yaml"), "-m", "dragonlab.cli"]
ONE = [sys.executable, "-m", "dragonlab.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}


def run(launcher: list[str], *args: str) -> str:
    done = subprocess.run([*launcher, *args], env=ENV, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def sft(launcher, data: Path, out: Path, *extra: str) -> str:
    return run(launcher, "sft", "--preset", "scratch-tiny", "--data", str(data), "--out", str(out), "--max-steps", "3",
               "--batch-size", "4", "--logging-steps", "1", "--save-steps", "2", "--max-length", "1024", *extra)


def losses(out: Path) -> list[float]:
    return [d["loss"] for d in read_log(out / "log.jsonl") if "loss" in d]


@pytest.fixture(scope="module")
def one_process(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "sft"
    sft(ONE, data, out, "--report-to", "tensorboard")
    return out


def test_sft_on_two_processes_trains_as_one_does_and_resumes(data, one_process, tmp_path):
    out = tmp_path / "sft"
    printed = sft(ACCELERATE, data, out)
    assert printed.count("trained scratch-tiny for 3 steps") == 1  # the main process reports
    assert losses(out) == pytest.approx(losses(one_process), rel=1e-5) and len(losses(out)) == 3
    lines = (out / "log.jsonl").read_text().splitlines()
    assert len(lines) == len((one_process / "log.jsonl").read_text().splitlines())  # written once, not twice
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "log.jsonl", "model", "run.json", "tokenizer"]
    assert json.loads((out / "run.json").read_text())["config"]["batch_size"] == 4

    # killed after the step-2 checkpoint: the rerun resumes there and ends where the whole run did
    shutil.rmtree(out / "model")
    shutil.rmtree(out / "checkpoints" / "checkpoint-3")
    assert "resumed from step 2" in sft(ACCELERATE, data, out)
    assert losses(out) == pytest.approx(losses(one_process), rel=1e-5)


def test_tensorboard_gets_the_training_curves(one_process):
    events = list((one_process / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = EventAccumulator(str(events[0].parent)).Reload().Tags()["scalars"]
    assert "train/loss" in scalars


def test_grpo_on_two_processes_logs_each_step_once_and_saves_once(data, one_process, tmp_path):
    out = tmp_path / "rl"
    printed = run(ACCELERATE, "rl", "--from", str(one_process), "--data", str(data), "--out", str(out),
                  "--max-steps", "2", "--num-generations", "2", "--prompts-per-step", "2", "--save-steps", "1")
    assert printed.count("GRPO for 2 steps") == 1
    steps = [d["step"] for d in read_log(out / "log.jsonl") if "reward" in d]
    assert steps == [1, 2]
    raw = [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()]
    assert raw.count(1) == 1  # the main process alone writes the log
    assert (out / "model" / "config.json").is_file() and (out / "checkpoints" / "checkpoint-2").is_dir()


def test_vllm_rollouts_are_refused_here_with_the_reason(data, one_process, tmp_path, capsys):
    from dragonlab.cli import main

    assert main(["rl", "--from", str(one_process), "--data", str(data), "--out", str(tmp_path / "rl"),
                 "--generation", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "generation='vllm' needs" in err and "use generation='transformers'" in err
    assert not (tmp_path / "rl").exists()


def test_rl_times_through_the_rpc_tracker_when_asked(data, one_process, tmp_path, capsys):
    """`rl --runner rpc` hands the tracker to its evaluator (tests/evaluation/test_evaluate.py times through a
    loopback tracker): a tracker that is not there stops the run before any training."""
    from dragonlab.testing.cluster import free_port

    from dragonlab.cli import main

    args = ["rl", "--from", str(one_process), "--data", str(data), "--out", str(tmp_path / "rl"), "--runner", "rpc"]
    assert main(args) == 2
    assert "RLConfig.runner must be 'local', or 'rpc' with a tracker and a key" in capsys.readouterr().err
    assert main(args + ["--tracker", f"127.0.0.1:{free_port()}", "--key", "gpu"]) == 2
    assert "no RPC tracker at 127.0.0.1" in capsys.readouterr().err
    assert not (tmp_path / "rl" / "checkpoints").exists()
