"""The scaling curve: what more training workloads, and a bigger model, buy on the benchmark.

One point per SFT run (`dragonlab sft`, a `--train-workloads` subset or all of them), read from
the run directory: its training workloads and model size, and its attempts at a held-out split
(`dragonlab attempts ... --out RUN/<attempts file>`). A point says

- exact per-attempt correctness, per task: correct, and no decision repaired by TVM;
- best-of-k speedup: per construction prompt, the fastest correct kernel among its first k
  attempts over the unscheduled kernel timed in the same run (an incorrect prompt counts 1x:
  the unscheduled kernel is kept), geomean over prompts with a bootstrap 95% interval.

    points = [scaling.point(run, "attempts-test.jsonl") for run in runs]
    scaling.figure(points).show()

`dragonlab scaling RUN... --out DIR` writes the points (`points.json`, read back by `read`), their
table, and each run's evidence (run.json, log.jsonl, the attempts, and `counts.json`: the model's
parameters and the training workloads, counted from the weights and the dataset) to DIR: the
curve can be drawn, checked, and computed again from DIR's run directories, without the models
or the dataset. docs/sft.md has the curve of the standard corpus and the
commands that made it (`results/cpu-standard/scaling/`).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.learn.attempts import read_attempts, summary
from dragonlab.learn.prompts import CONSTRUCTION, TASKS
from dragonlab.reporting.compare import geomean, geomean_interval


@dataclass(frozen=True)
class ScalingPoint:
    run: str
    preset: str
    parameters: int
    train_workloads: int
    steps: int
    attempts: int
    exact: dict[str, float]  # task -> share of its attempts
    correct: dict[str, float]
    cut_short: int  # constrained scripts that ended at a dead end or the token limit
    k: int  # attempts per construction prompt
    best_of_k: float | None  # geomean speedup over the unscheduled kernel
    interval: tuple[float, float] | None
    # the attempts were written with constrained decoding (which makes nearly every script exact:
    # exactness without it is what the model learned); None: they say nothing of it
    constrained: bool | None = None


def point(run: str | os.PathLike, attempts: str = "attempts-test.jsonl") -> ScalingPoint:
    """The point of the SFT run directory `run`, from its attempts file `attempts` (a name in
    `run`, or a path). `run` may also be a shipped model directory, which holds its run's
    `run.json` and `log.jsonl` beside the weights (`data/cpu-standard-v1/model`)."""
    from dragonlab.learn import dataset
    from dragonlab.learn.sft import read_log

    run = Path(run)
    meta = json.loads((run / "run.json").read_text())
    config = meta["config"]
    model_dir = run / "model" if (run / "model").is_dir() else run
    path = run / attempts
    if not path.is_file():
        raise InputError(f"{path}: no attempts file (dragonlab attempts --model {model_dir} ... --out {path})")
    judged = read_attempts(path)
    if not judged:
        raise InputError(f"{path}: no attempts in it")
    counts = json.loads((run / COUNTS).read_text()) if (run / COUNTS).is_file() else {}
    workloads = config.get("train_workloads") or counts.get("train_workloads")
    if workloads is None:
        if not Path(meta["data"]).is_dir():
            raise InputError(f"{run}: its dataset {meta['data']} is not here and no {COUNTS} says how many workloads "
                             "it trained on")
        dsd, _ = dataset.load(meta["data"])
        workloads = len(set(dsd["train"]["workload"]))
    by_prompt = defaultdict(list)
    for a in sorted(judged, key=lambda a: a.sample):
        if a.task == CONSTRUCTION:
            by_prompt[(a.split, a.index)].append(a)
    k = min((len(v) for v in by_prompt.values()), default=0)
    # a prompt with no correct kernel keeps the unscheduled one: 1x
    counted = [max((a.evaluation.speedup for a in tries[:k] if a.evaluation.correct and a.evaluation.speedup),
                   default=1.0) for tries in by_prompt.values()]
    rows = {r["task"]: r for r in summary(judged)}
    constrained = {a.ending is not None for a in judged}  # a constrained attempt says how it ended
    tasks = [t for t in TASKS if t in rows]
    return ScalingPoint(
        run=str(run), preset=config["preset"], train_workloads=workloads,
        parameters=_parameters(model_dir, counts),
        steps=max((d.get("step", 0) for d in read_log(run / "log.jsonl")), default=0), attempts=len(judged),
        exact={t: rows[t]["exact"] for t in tasks}, correct={t: rows[t]["correct"] for t in tasks},
        cut_short=rows["all"]["dead_ends"] + rows["all"]["cut_at_length"], k=k,
        best_of_k=geomean(counted), interval=geomean_interval(counted),
        constrained=next(iter(constrained)) if len(constrained) == 1 else None)


def write(points: list[ScalingPoint], runs: list[Path], attempts: list[Path], out: str | os.PathLike) -> Path:
    """`out`/points.json (the points), `out`/points.md (their table) and, for each run, `out`/<its
    `label`>/ with its run.json, log.jsonl and attempts file. Files are replaced whole."""
    from dragonlab.core.jsonl import write_atomic

    out = Path(out)
    for p, run, judged in zip(points, runs, attempts):
        evidence = out / label(run)
        evidence.mkdir(parents=True, exist_ok=True)
        for f in (run / "run.json", run / "log.jsonl", judged):
            if f.resolve() != (evidence / f.name).resolve():
                write_atomic(evidence / f.name, f.read_bytes())
        write_atomic(evidence / COUNTS, json.dumps({"parameters": p.parameters,
                                                    "train_workloads": p.train_workloads}) + "\n")
    write_atomic(out / "points.json", json.dumps([asdict(p) for p in points], indent=1) + "\n")
    write_atomic(out / "points.md", table(points) + "\n")
    return out / "points.json"


COUNTS = "counts.json"  # in an evidence directory: what the weights and the dataset, not kept, said


def label(run: str | os.PathLike) -> str:
    """A run's name in tables and under `write`'s directory: its directory's name, or for a shipped
    model directory ("data/cpu-standard-v1/model") the last two parts."""
    run = Path(run)
    return f"{run.parent.name}/{run.name}" if run.name == "model" else run.name


def read(path: str | os.PathLike) -> list[ScalingPoint]:
    """The points of a points.json written by `write`."""
    try:
        rows = json.loads(Path(path).read_text())
        return [ScalingPoint(**{**d, "interval": tuple(d["interval"]) if d.get("interval") else None})
                for d in rows]
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{path}: not a points.json written by `dragonlab scaling` ({e})") from None


def _parameters(model_dir: Path, counts: dict) -> int:
    """Parameters of a saved model, from its safetensors headers (no weights loaded), or as the
    run's `counts` recorded them where the weights are not kept."""
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        if "parameters" in counts:
            return counts["parameters"]
        raise InputError(f"{model_dir}: no safetensors weights, and no {COUNTS} beside its run.json")
    total = 0
    for f in files:
        with safe_open(f, "np") as weights:
            total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    return total


def figure(points: list[ScalingPoint]):
    """Exact correctness per task and best-of-k speedup against training workloads, a line per
    preset (model size)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("exact per-attempt correctness",
                                                        "best-of-k speedup over the unscheduled kernel"))
    by_preset = defaultdict(list)
    for p in sorted(points, key=lambda p: p.train_workloads):
        by_preset[(p.preset, p.parameters, p.constrained)].append(p)
    for (preset, params, constrained), line in by_preset.items():
        x = [p.train_workloads for p in line]
        name = f"{preset} ({params / 1e6:.1f}M{DECODING[constrained]})"
        for task in TASKS:
            if any(task in p.exact for p in line):
                fig.add_trace(go.Scatter(x=x, y=[p.exact.get(task) for p in line], mode="lines+markers",
                                         name=f"{name}, {task}"), row=1, col=1)
        low = [p.best_of_k - p.interval[0] if p.interval else 0 for p in line]
        high = [p.interval[1] - p.best_of_k if p.interval else 0 for p in line]
        fig.add_trace(go.Scatter(x=x, y=[p.best_of_k for p in line], mode="lines+markers", name=f"{name}, best-of-k",
                                 error_y=dict(type="data", symmetric=False, array=high, arrayminus=low)), row=1, col=2)
    fig.update_xaxes(type="log", title_text="training workloads")
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(height=420, legend=dict(orientation="h", y=-0.25))
    return fig


DECODING = {True: ", constrained", False: ", unconstrained", None: ""}


def table(points: list[ScalingPoint]) -> str:
    """The points as a Markdown table (docs/sft.md)."""
    rows = ["| run | model | training workloads | steps | decoding | attempts | exact (construction / refinement) "
            "| best-of-k speedup (95% interval) | cut short |", "|---|---|---:|---:|---|---:|---|---|---:|"]
    for p in sorted(points, key=lambda p: (p.constrained is False, p.parameters, p.train_workloads)):
        exact = " / ".join(f"{p.exact[t]:.1%}" if t in p.exact else "-" for t in TASKS)
        interval = f" ({p.interval[0]:.2f}-{p.interval[1]:.2f})" if p.interval else ""
        speed = f"{p.best_of_k:.2f}x{interval}" if p.best_of_k else "-"
        decoding = DECODING[p.constrained].removeprefix(", ") or "-"
        rows.append(f"| {label(p.run)} | {p.preset} ({p.parameters / 1e6:.1f}M) | {p.train_workloads} | "
                    f"{p.steps} | {decoding} | {p.attempts} | {exact} | {speed} (k={p.k}) | {p.cut_short} |")
    return "\n".join(rows)
