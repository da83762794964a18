"""The scaling curve's points, read from an SFT run directory and its attempts."""

import dataclasses
import json
import shutil

import pytest

from dragonlab.core.errors import InputError
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn import models
from dragonlab.learn.attempts import Attempt
from dragonlab.reporting import scaling


def _attempt(index, sample, task, speedup=None, repairs=()):
    latencies = (1.0,) * 3 if speedup else None
    e = Evaluation("w", "cpu", "ok" if speedup else "check", None if speedup else "wrong", repairs, latencies,
                   speedup if speedup else None)
    return Attempt("test", index, sample, task, "w", "w", "get C", e, "eos")


def test_a_point_reads_the_run_and_scores_its_attempts(tiny, tmp_path):
    run = tiny[0].out
    attempts = tmp_path / "attempts.jsonl"
    rows = [_attempt(0, 0, "construction", 2.0), _attempt(0, 1, "construction", 4.0, repairs=("tile: 3 -> 4",)),
            _attempt(1, 0, "construction"), _attempt(1, 1, "construction"),
            _attempt(2, 0, "refinement", 1.5), _attempt(3, 0, "refinement")]
    attempts.write_text("".join(json.dumps(a.to_json()) + "\n" for a in rows))
    p = scaling.point(run, attempts)
    model, _ = models.load(tiny[0].model_dir)
    assert p.parameters == sum(t.numel() for t in model.parameters()) and p.preset == "scratch-tiny"
    assert p.train_workloads == 2 and p.steps == 160 and p.attempts == 6 and p.k == 2
    assert p.exact == {"construction": 0.25, "refinement": 0.5} and p.correct == {"construction": 0.5,
                                                                                 "refinement": 0.5}
    assert p.best_of_k == pytest.approx(2.0)  # 4x (repaired, still correct) and 1x (none correct)
    assert p.interval == (pytest.approx(1.0), pytest.approx(4.0))
    assert "| run | scratch-tiny (" in scaling.table([p]) and "2.00x (1.00-4.00) (k=2)" in scaling.table([p])
    assert len(scaling.figure([p]).data) == 3  # exact per task, and best-of-k
    with pytest.raises(InputError, match="no attempts file"):
        scaling.point(run, tmp_path / "missing.jsonl")
    shipped = tmp_path / "shipped"  # a shipped model: the weights with its run's run.json and log beside them
    shutil.copytree(tiny[0].model_dir, shipped)
    for name in ("run.json", "log.jsonl"):
        shutil.copy(run / name, shipped / name)
    assert scaling.point(shipped, attempts) == dataclasses.replace(p, run=str(shipped))
    assert scaling.label("data/cpu-standard-v1/model") == "cpu-standard-v1/model" and scaling.label(run) == run.name


def test_the_scaling_command_writes_the_points_and_the_evidence_beside_them(tiny, tmp_path, capsys):
    from dragonlab.cli import main

    run = tiny[0].out
    attempts, free = tmp_path / "judged.jsonl", tmp_path / "free.jsonl"  # constrained, and not
    attempts.write_text(json.dumps(_attempt(0, 0, "construction", 2.0).to_json()) + "\n")
    free.write_text(json.dumps(dataclasses.replace(_attempt(0, 0, "construction"), ending=None).to_json()) + "\n")
    out = tmp_path / "curve"
    assert main(["scaling", f"{run}={attempts}", f"{run}={free}", "--out", str(out)]) == 0
    points = scaling.read(out / "points.json")
    assert points == [scaling.point(run, attempts), scaling.point(run, free)]
    assert [p.constrained for p in points] == [True, False] and points[0].best_of_k == pytest.approx(2.0)
    shown = capsys.readouterr().out
    assert "| 2 | 160 | constrained | 1 |" in shown and "| 2 | 160 | unconstrained | 1 |" in shown
    assert (out / "points.md").read_text().startswith("| run") and len(scaling.figure(points).data) == 4
    evidence = out / run.name
    assert sorted(p.name for p in evidence.iterdir()) == ["counts.json", "free.jsonl", "judged.jsonl", "log.jsonl",
                                                          "run.json"]
    # The points again from the evidence alone: neither the weights nor the dataset are there.
    meta = json.loads((evidence / "run.json").read_text())
    (evidence / "run.json").write_text(json.dumps({**meta, "data": str(tmp_path / "gone")}))
    again = [scaling.point(evidence, evidence / name) for name in ("judged.jsonl", "free.jsonl")]
    assert [dataclasses.replace(p, run=str(run)) for p in again] == points
    (evidence / "counts.json").unlink()
    with pytest.raises(InputError, match="is not here and no counts.json"):
        scaling.point(evidence, evidence / "judged.jsonl")
    assert main(["scaling", f"{run}={attempts}", f"{run}={attempts}", "--out", str(out)]) == 2  # would mix
    # the default attempts file is RUN/attempts-test.jsonl; a missing one is named
    assert main(["scaling", str(run), "--out", str(out)]) == 2
    assert "attempts-test.jsonl: no attempts file" in capsys.readouterr().err
    (out / "points.json").write_text("[{\"run\": 1}]")
    with pytest.raises(InputError, match="points.json: not a points.json"):
        scaling.read(out / "points.json")
