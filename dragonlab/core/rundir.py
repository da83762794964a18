"""Run directories of the long jobs (SFT, RL, the report): claim, checkpoints, logs, processes.

A run directory is claimed by writing `run.json` (the run's config); a rerun with the same
config resumes, another config is refused. A config field that a newer dragonlab added counts as
the same when the rerun leaves it at its default (`completed`): the run was made with what the
default does. Trainer checkpoints count once `trainer_state.json`, the last file the Trainer
writes, is in them; an incomplete one (a kill during the save) is
removed before resuming. `log.jsonl` is append-only; readers keep the last line per step.

Launched by `accelerate launch` (several processes, one run directory), every process calls
the same functions: the main process claims, cleans and writes; the others wait for it
(`main_first`) and then only read. `processes()` is the shared `accelerate.PartialState`, which
the Trainer also uses, so the process group is set up once, on gloo for CPUs.

Nothing here imports TVM: SFT and RL import it only to judge scripts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import MISSING, asdict, fields, is_dataclass
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_json, read_lines, write_atomic


def processes():
    """The processes of this run (`accelerate.PartialState`): one, or those `accelerate launch` started."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def is_main() -> bool:
    return processes().is_main_process


@contextlib.contextmanager
def main_first():
    """The main process runs the block first; the others run it after it has finished."""
    with processes().main_process_first():
        yield


def wait_for_everyone() -> None:
    processes().wait_for_everyone()


def per_process(total: int, what: str, n: int | None = None) -> int:
    """A global batch split evenly over `n` processes (default: this run's): the same config
    trains the same way whatever the number of processes."""
    n = n or processes().num_processes
    if total % n:
        raise InputError(f"{what} {total} does not split evenly over {n} processes")
    return total // n


def claim(out: Path, config, data, **extra) -> None:
    """Make `out` this run's directory: a new one, or one holding the same config (a resume).
    `config` is the run's dataclass; `extra` what else fixes the run. Call it in `main_first`
    when several processes share the run: the main one writes, the others check."""
    run = _as_read({"config": asdict(config), "data": str(Path(data).resolve()), **extra})
    meta = out / "run.json"
    if meta.exists():
        old = read_json(meta)
        if not (isinstance(old, dict) and isinstance(old.get("config"), dict)):
            raise InputError(f"{meta}: not a dragonlab run.json (no config object); choose a new --out")
        old = {**old, "config": completed(type(config), old["config"])}
        # what an older dragonlab did not record (a model's digest) is taken as this run's
        old = {**{k: v for k, v in run.items() if k not in old}, **old}
        if old != run:
            raise InputError(f"{out} holds another run ({meta} differs: {_diff(old, run)}); "
                                  "choose a new --out or rerun with the same settings to resume")
        return
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} exists and is not a dragonlab run directory; choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(meta, json.dumps(run, indent=1) + "\n")


def recorded(config) -> dict:
    """A config as a run's files record it: `asdict`, as JSON reads it back (tuples are lists)."""
    return _as_read(asdict(config))


def completed(cls, written: dict) -> dict:
    """The config of class `cls` as a file wrote it (`recorded`), with every field a newer dragonlab
    added at its default, nested configs (`measure`) too: the run was made with what the default
    does."""
    out = dict(written)
    for f in fields(cls):
        default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
        if default is MISSING:
            continue
        if f.name not in out:
            out[f.name] = recorded(default) if is_dataclass(default) else _as_read(default)
        elif is_dataclass(default) and isinstance(out[f.name], dict):
            out[f.name] = completed(type(default), out[f.name])
    return out


def _as_read(value):
    return json.loads(json.dumps(value))


def _diff(old: dict, new: dict) -> str:
    """The settings that differ, each by its dotted name (`config.k`, `digests.rl`)."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
        return out

    a, b = flat(old), flat(new)
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def last_complete_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint under `folder`; incomplete ones are removed (main process)."""
    if not folder.is_dir():
        return None
    found = sorted((p for p in folder.glob("checkpoint-*") if p.name.rsplit("-", 1)[1].isdigit()), key=step_of)
    complete = [p for p in found if (p / "trainer_state.json").is_file()]
    for p in found:
        if p not in complete:
            shutil.rmtree(p, ignore_errors=True)  # cut short by a kill during the save
    return complete[-1] if complete else None


def log_callback(path: Path):
    """A Trainer callback that appends every log line (loss, rewards, ...) to `path` with its step,
    from the main process only."""
    from transformers import TrainerCallback

    class Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                append_lines(path, [{"step": state.global_step, **logs}])

    return Log()


def read_log(path: str | os.PathLike) -> list[dict]:
    """The log's lines, the last one per (step, kind) kept (a resumed run repeats some steps)."""
    path = Path(path)
    if not path.exists():
        return []
    last = {(d.get("step"), "eval" in d, "train_runtime" in d): d for d in read_lines(path, _log_line)}
    return sorted(last.values(), key=lambda d: (d.get("step", 0), "eval" in d))


def _log_line(d: dict) -> dict:
    if not isinstance(d, dict):
        raise ValueError("a log line must be a JSON object")
    return d


REPORT_TO = ("none", "tensorboard")


def reporting(report_to: str, out: Path) -> list:
    """Trainer callbacks that also send the training curves to `report_to`: "tensorboard" writes
    event files under `out/tensorboard` (offline; `tensorboard --logdir out/tensorboard`), from
    the main process only. The trainers' own `report_to` stays "none" so nothing else is set up."""
    if report_to not in REPORT_TO:
        raise InputError(f"report_to must be one of {', '.join(REPORT_TO)}, got {report_to!r}")
    if report_to == "none":
        return []
    from transformers.integrations import TensorBoardCallback

    callback = TensorBoardCallback()
    callback.logging_dir = str(out / "tensorboard")
    return [callback]
