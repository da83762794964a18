"""The model shipped with the standard corpus (data/cpu-standard-v1/model) is what its card says,
and writes scripts as a user runs it from a fresh clone: `dragonlab attempts --model
data/cpu-standard-v1/model ... --constrained`."""

import json
from pathlib import Path

from dragonlab.cli import main
from dragonlab.learn.attempts import read_attempts

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "cpu-standard-v1" / "model"


def test_the_shipped_model_is_small_and_says_how_it_was_trained():
    files = {p.name: p.stat().st_size for p in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "run.json", "log.jsonl"} <= set(files)
    assert sum(files.values()) <= 50 << 20
    run = json.loads((SHIPPED / "run.json").read_text())["config"]
    card = (SHIPPED / "README.md").read_text()
    assert f"--max-steps {run['max_steps']}" in card and f"--preset {run['preset']}" in card
    assert json.loads((SHIPPED / "log.jsonl").read_text().splitlines()[-1])["step"] == run["max_steps"]


def test_the_shipped_model_writes_kernels_that_the_evaluator_finds_correct(data, tmp_path):
    """On the session's quick workloads (a matmul and a softmax: shapes the model never saw, of
    families it did), greedy and constrained: every script follows a design-space sketch, so
    every one builds, runs and computes the unscheduled kernel's numbers."""
    out = tmp_path / "attempts.jsonl"
    assert main(["attempts", "--model", str(SHIPPED), "--data", str(data), "--split", "train", "--n", "1",
                 "--temperature", "0", "--constrained", "--out", str(out)]) == 0
    attempts = read_attempts(out)
    assert len(attempts) == 4 and {a.task for a in attempts} == {"construction", "refinement"}
    assert all(a.ending == "eos" for a in attempts)
    assert all(a.evaluation.correct for a in attempts), [(a.name, a.evaluation.stage) for a in attempts]


def test_a_model_digest_follows_the_weights_and_tokenizer_not_the_notes(tmp_path):
    import shutil

    from dragonlab.learn.models import digest

    copy = tmp_path / "model"
    shutil.copytree(SHIPPED, copy)
    assert digest(copy) == digest(SHIPPED)
    (copy / "README.md").write_text("another note")
    (copy / "run.json").write_text("{}")
    assert digest(copy) == digest(SHIPPED)
    for name in ("model.safetensors", "tokenizer.json"):
        original = (copy / name).read_bytes()
        (copy / name).write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        assert digest(copy) != digest(SHIPPED), name
        (copy / name).write_bytes(original)


def test_a_lora_adapter_digest_follows_its_local_base_checkpoint(tmp_path):
    """An adapter loads its base's weights too: a changed base is another model."""
    import json
    import shutil

    from dragonlab.learn.models import digest

    base = tmp_path / "base"
    shutil.copytree(SHIPPED, base)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 8}))
    (adapter / "adapter_model.safetensors").write_bytes(b"lora weights")
    before = digest(adapter)
    weights = (base / "model.safetensors").read_bytes()
    (base / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    assert digest(adapter) != before
    (base / "model.safetensors").write_bytes(weights)
    assert digest(adapter) == before
