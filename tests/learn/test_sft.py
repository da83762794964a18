"""Models and supervised fine-tuning on real datasets: a scratch model that learns to write
scripts that decode, resume after a kill, SmolLM2 with LoRA offline, attempts judged by the
evaluator, and clear errors for bad input."""

import json
import os
import queue
import signal
import subprocess
import sys
import time

import pytest

from dragonlab.cli import main
from dragonlab.core import codec
from dragonlab.core.errors import InputError
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.learn import dataset, models
from dragonlab.learn.attempts import Attempt, read_attempts, sample_and_evaluate, summary
from dragonlab.learn.sft import SFTConfig, read_log, train


def test_scratch_tiny_learns_its_examples_and_its_scripts_decode(tiny, data):
    # How long it trains is reported by --durations (the `tiny` fixture's setup), not asserted here.
    run, _ = tiny
    losses = [d["loss"] for d in run.log if "loss" in d]
    assert losses[-1] < losses[0] / 20, losses
    model, tokenizer = models.load(run.model_dir)
    dsd, _ = dataset.load(data)
    rows = dsd["train"].to_list()
    scripts = models.generate(model, tokenizer, [r["prompt"] for r in rows], temperature=0)
    decoded = 0
    for (script,) in scripts:
        try:
            codec.decode(script)
            decoded += 1
        except codec.CodecError:
            pass
    assert decoded == len(rows), f"{decoded}/{len(rows)} generated scripts decode"


def test_generate_returns_n_samples_per_prompt_within_the_context(tiny, data):
    model, tokenizer = models.load(tiny[0].model_dir)
    dsd, _ = dataset.load(data)
    prompts = dsd["train"]["prompt"][:3]
    out = models.generate(model, tokenizer, prompts, n=2, temperature=1.0, max_new_tokens=10_000, batch_size=4,
                          seed=0)
    assert [len(x) for x in out] == [2, 2, 2]
    assert all(isinstance(s, str) for x in out for s in x)


def test_generation_keeps_a_static_cache_and_writes_what_the_growing_one_writes(tiny, data, monkeypatch):
    import torch

    model, tokenizer = models.load(tiny[0].model_dir)
    prompts = dataset.load(data)[0]["train"]["prompt"][:2]
    kept, generate = [], model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: kept.append(kw.get("cache_implementation")) or generate(**kw))
    for temperature in (0, 0.8):
        ours = models.generate(model, tokenizer, prompts, n=1, temperature=temperature, max_new_tokens=64, seed=0)
        torch.manual_seed(0)
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
        with torch.inference_mode():
            plain = generate(**enc, max_new_tokens=64, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id,
                             **(dict(do_sample=True, temperature=temperature) if temperature else
                                dict(do_sample=False)))  # (the saved generation config samples)
        assert ours == [[t] for t in tokenizer.batch_decode(plain[:, enc["input_ids"].shape[1]:],
                                                              skip_special_tokens=True)]
    assert kept == ["static", "static"]


def test_attempts_are_judged_appended_and_resumed(tiny, data, tmp_path):
    model, tokenizer = models.load(tiny[0].model_dir)
    dsd, workloads = dataset.load(data)
    path = tmp_path / "attempts.jsonl"
    with Evaluator("cpu") as evaluator:
        first = sample_and_evaluate(model, tokenizer, evaluator, dsd, workloads, split="train", n=2,
                                    temperature=0.7, limit=3, out=path, progress=False)
        lines = path.read_text().splitlines()
        assert len(first) == len(lines) == 6
        again = sample_and_evaluate(model, tokenizer, evaluator, dsd, workloads, split="train", n=2,
                                    temperature=0.7, limit=3, out=path, progress=False)
    assert path.read_text().splitlines() == lines  # nothing generated or written twice
    assert [a.to_json() for a in again] == [a.to_json() for a in first]
    assert read_attempts(path) == first and Attempt.from_json(first[0].to_json()) == first[0]
    rows = {r["task"]: r for r in summary(first)}
    assert rows["all"]["attempts"] == 6
    assert rows["all"]["correct"] == sum(a.evaluation.correct for a in first) / 6
    stopped = sum(rows["all"]["stopped_at"].values())
    assert stopped == sum(not a.evaluation.correct or a.evaluation.stage == "time" for a in first)


def test_sft_resumes_from_the_last_checkpoint_after_a_kill(data, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "dragonlab.cli", "sft", "--preset", "scratch-tiny", "--data", str(data),
           "--out", str(out), "--max-steps", "40", "--save-steps", "10", "--batch-size", "2",
           "--micro-batch-size", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (out / "checkpoints" / "checkpoint-20" / "trainer_state.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no second checkpoint"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "model").exists()
    before = read_log(out / "log.jsonl")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from step 20" in done.stdout or "resumed from step 30" in done.stdout, done.stdout
    log = read_log(out / "log.jsonl")
    steps = [d["step"] for d in log if "loss" in d]
    assert steps == list(range(10, 41, 10)) or steps == list(range(5, 41, 5)), steps
    assert all(d in log for d in before if "loss" in d and d["step"] <= 20)  # what was logged is kept
    assert (out / "model" / "config.json").is_file()


def test_sft_refuses_a_directory_of_another_run_and_overwrites_nothing(data, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["sft", "--preset", "scratch-tiny", "--data", str(data), "--out", str(out)]) == 2
    assert "not a dragonlab run directory" in capsys.readouterr().err
    (out / "notes.txt").unlink()
    (out / "run.json").write_text(json.dumps({"config": {**SFTConfig().__dict__, "preset": "scratch-small"},
                                              "data": str(data.resolve())}))
    assert main(["sft", "--preset", "scratch-tiny", "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "config.preset: 'scratch-small' -> 'scratch-tiny'" in err
    assert sorted(p.name for p in out.iterdir()) == ["run.json"]


def test_bad_dataset_and_settings_get_one_clear_error(data, tmp_path, capsys):
    assert main(["sft", "--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not a dataset directory" in capsys.readouterr().err
    assert main(["sft", "--data", str(data), "--out", str(tmp_path / "o"), "--max-steps", "0"]) == 2
    assert "SFTConfig.max_steps must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["sft", "--data", str(data), "--out", str(tmp_path / "o"), "--threads", "0"]) == 2
    assert "threads must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["sft", "--preset", "gpt-17", "--data", str(data), "--out", str(tmp_path / "o")]) == 2
    assert "unknown preset 'gpt-17'" in capsys.readouterr().err
    assert main(["sft", "--data", str(data), "--out", str(tmp_path / "o"), "--train-workloads", "9999"]) == 2
    assert "SFTConfig.train_workloads: 9999 workloads asked for; the split has" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_smollm2_lora_trains_a_few_steps_offline(data, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import: setting the variable now is too late
    run = train(data, tmp_path / "run", SFTConfig(preset="smollm2-135m-lora", max_steps=2, batch_size=1,
                                                  logging_steps=1, max_length=2048), progress=False)
    assert (run.model_dir / "adapter_config.json").is_file()
    assert [d["step"] for d in run.log if "loss" in d] == [1, 2]
    model, tokenizer = models.load(run.model_dir)
    (script,), = models.generate(model, tokenizer, ["task: construction\n"], temperature=0, max_new_tokens=4)
    assert isinstance(script, str)


def test_a_local_scratch_model_continues_with_every_weight_when_asked(tiny, data, tmp_path):
    """A model pre-trained here (on design-space samples, say) goes on training as a whole model,
    with its own tokenizer, instead of getting LoRA adapters."""
    import torch

    start = tiny[0].model_dir
    run = train(data, tmp_path / "run", SFTConfig(preset=str(start), full_finetune=True, max_steps=2,
                                                  batch_size=2, learning_rate=1e-3, logging_steps=1), progress=False)
    assert (run.model_dir / "config.json").is_file() and not (run.model_dir / "adapter_config.json").exists()
    (before, tok0), (after, tok1) = models.load(start), models.load(run.model_dir)
    assert tok1.get_vocab() == tok0.get_vocab()
    changed = [n for n, p in after.named_parameters() if not torch.equal(p, dict(before.named_parameters())[n])]
    assert len(changed) == len(list(after.parameters()))  # every weight trained (embeddings tied to the head)


def test_a_trainer_pings_no_hub(data, tmp_path, monkeypatch):
    """trl's trainers send telemetry from a thread that resolves huggingface.co while accelerate
    changes the environment: a Jupyter kernel died of it in getaddrinfo. Training never sends it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _telemetry

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)  # as on a user's machine
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("CI", raising=False)  # trl sends none where CI is set
    started = []
    monkeypatch.setattr(_telemetry, "_start_telemetry_thread", lambda: started.append(True))
    monkeypatch.setattr(_telemetry, "_TELEMETRY_QUEUE", queue.Queue())
    train(data, tmp_path / "run", SFTConfig(preset="scratch-tiny", max_steps=1, batch_size=2), progress=False)
    assert not started


def test_batches_are_drawn_as_the_config_or_else_the_preset_says(tmp_path):
    from dragonlab.learn.sft import trainer_arguments

    def strategy(config, preset):
        return trainer_arguments(config, tmp_path, defaults=models.PRESETS[preset], progress=False).train_sampling_strategy

    assert strategy(SFTConfig(), "scratch-small") == models.PRESETS["scratch-small"].sampling
    assert strategy(SFTConfig(sampling="group_by_length"), "scratch-small") == "group_by_length"
    assert strategy(SFTConfig(sampling="random"), "scratch-base") == "random"
    assert strategy(SFTConfig(), "scratch-base") == "group_by_length"


def test_both_trainers_recompute_no_activations_and_use_no_deprecated_argument(tmp_path):
    """trl turns activation checkpointing on by default; on these models it costs a third of the
    speed. Off, by transformers' current name (the old one warns that v6 removes it)."""
    import warnings

    from dragonlab.learn import rl, sft

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        arguments = [sft.trainer_arguments(SFTConfig(), tmp_path, defaults=models.PRESETS["scratch-tiny"],
                                           progress=False),
                     rl.trainer_arguments(rl.RLConfig(), tmp_path, processes=1, progress=False)]
    for args in arguments:
        assert args.activation_checkpointing is False and args.gradient_checkpointing is False


def test_a_micro_batch_accumulates_to_the_batch_and_must_divide_each_processs_share(tmp_path):
    """`micro_batch_size` examples per forward pass, gradients accumulated to the same step: the
    optimizer still sees `batch_size` examples over all processes."""
    from dragonlab.learn import sft

    tiny = models.PRESETS["scratch-tiny"]
    args = sft.trainer_arguments(SFTConfig(batch_size=8, micro_batch_size=2), tmp_path, defaults=tiny, processes=2,
                                 progress=False)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (2, 2)
    args = sft.trainer_arguments(SFTConfig(batch_size=8), tmp_path, defaults=tiny, processes=1, progress=False)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 1)
    with pytest.raises(InputError, match="micro_batch_size 3 does not divide the 4 examples of each process's batch"):
        sft.trainer_arguments(SFTConfig(batch_size=8, micro_batch_size=3), tmp_path, defaults=tiny, processes=2,
                              progress=False)
    with pytest.raises(InputError, match="micro_batch_size"):
        SFTConfig(micro_batch_size=0)
