"""`tune`: a network's kernels written by the model, built into the network, and measured
against TVM's defaults and MetaSchedule in the same run.

For each tuning task of the network (MetaSchedule's own extraction, with its weights):
1. **dragon**: the model writes `attempts` scripts (constrained decoding by default), the
   evaluator judges each one, and the fastest correct kernel is the task's schedule. A task
   with no correct attempt keeps TVM's default schedule; the result names it.
2. **tune_relax@N, tune_relax@10N**: MetaSchedule's `tune_relax` on the whole network, with as
   many measurements in all as the model made (N: tasks x attempts) and with `budget` (10N by
   default). Its gradient task scheduler shares them out over the tasks after one round of
   `attempts` trials each; it builds and times with collection's builder and runner, and its
   JSONDatabase keeps every measured candidate.
3. Every chosen kernel is timed again by one evaluator, beside the unscheduled kernel, so the
   per-task latencies compare.
4. Each system's kernels go into a MetaSchedule JSONDatabase (`databases/<system>/`: the design
   part of each trace post-processed by the target's post-processors, which is what was judged),
   the network is built with it (`ms.relax_integration.compile_relax`; `untuned` is the build
   with an empty database), checked against PyTorch eager on fresh random inputs, and timed
   end to end. Builds happen in the evaluator's build workers, runs in its sandboxed workers.

Everything is kept in the run directory as it is made (attempts, search records, the chosen
kernels as scripts, per-task timings, databases, one line per measured build), so the same call
resumes after a kill.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dragonlab.core.codec import CodecError, decode, encode
from dragonlab.core.errors import InputError, UnavailableError, one_line
from dragonlab.core.jsonl import append_lines, read_json, read_lines, write_atomic
from dragonlab.core.progress import progress_bar
from dragonlab.core.rundir import claim, completed, recorded
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.replay import module_json
from dragonlab.evaluation.workers import RemoteError, WorkerError
from dragonlab.tune.config import TuneConfig
from dragonlab.tune.network import Network, reference_data
from dragonlab.tune.replay import build_network, check_network, time_network, write_database

UNTUNED, DRAGON = "untuned", "dragon"
SPLIT = "tune"  # the attempts' split name
BUILD_SEC = 600.0  # limit for writing a database or building the whole network (a kernel's is EvalConfig's)


def tune_relax(trials: int) -> str:
    """The name of MetaSchedule's `tune_relax` run with `trials` measurements over the network."""
    return f"tune_relax@{trials}"


@dataclass(frozen=True)
class TaskResult:
    """One tuning task: its unscheduled latency and each system's chosen kernel, timed again."""

    key: str
    name: str
    weight: int
    unscheduled: float | None  # seconds, median
    latencies: dict[str, float | None]  # system -> seconds (median) of its kernel; None: default schedule
    dragon_correct: int = 0  # of the model's attempts at the task
    dragon_attempts: int = 0


@dataclass(frozen=True)
class SystemResult:
    """One build of the network."""

    system: str
    stage: str  # "ok", or where it stopped: "build", "run", "check", "time"
    reason: str | None = None
    latencies: tuple[float, ...] | None = None  # seconds per network run, one per repeat
    max_error: float | None = None  # worst |out - ref| / tolerance over all outputs and input sets
    seconds: float | None = None  # wall time to tune (model writing and judging, or search); None: resumed
    measurements: int = 0  # kernels built and judged (model) or measured (search)
    defaults: tuple[str, ...] = ()  # tasks left to TVM's default schedule

    @property
    def latency(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None


MEASURED = ("system", "stage", "reason", "latencies", "max_error")  # a build's fields that networks.jsonl keeps


@dataclass(frozen=True)
class TuneResult:
    network: str
    target: str
    config: dict
    tasks: list[TaskResult]
    systems: list[SystemResult]
    out: str = ""

    def system(self, name: str) -> SystemResult | None:
        return next((s for s in self.systems if s.system == name), None)

    def ratio(self, a: str, b: str) -> float | None:
        """Network latency of system a over system b (< 1: a is faster)."""
        x, y = self.system(a), self.system(b)
        return x.latency / y.latency if x and y and x.latency and y.latency else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> TuneResult:
        return cls(**{**d, "tasks": [TaskResult(**t) for t in d["tasks"]],
                      "systems": [SystemResult(**{**s, "latencies": tuple(s["latencies"]) if s["latencies"] else None,
                                                  "defaults": tuple(s["defaults"])}) for s in d["systems"]]})


def tune(network: Network, out, *, dragon, target: str = "cpu", config: TuneConfig = TuneConfig(),
         searches_from=None, progress: bool = True) -> TuneResult:
    """Tune `network` with the model in the directory `dragon`, and measure it against the
    untuned build and MetaSchedule (module docstring). `out`: a new run directory, or this run's
    to resume. Writes `tune.json` and `tune.html` there. `searches_from`: another run of the same
    network, target and search settings (its `tune.json` and `chosen.json`, e.g. a directory of
    `results/tune/`), whose `tune_relax` kernels, measurements and wall times are taken instead of
    searching again: another model is then measured against the same searches, in minutes. Every
    kernel and build is still timed in this run."""
    from dragonlab.evaluation.evaluate import Evaluator

    spec = get_target(target)
    if spec.kind != "llvm":
        raise UnavailableError(f"tune builds and runs the network on this machine's CPU; target {spec.name} "
                               "needs its device here")
    out, dragon = Path(out), Path(dragon)
    if not (dragon / "config.json").is_file():
        raise InputError(f"--dragon {dragon}: not a model directory (no config.json)")
    workloads = network.workloads(spec.tvm())
    if not workloads:
        raise InputError(f"{network.name}: TVM extracts no tuning task from it")
    from dragonlab.learn.models import digest

    reused = _searches(Path(searches_from), network, spec, workloads, config) if searches_from else None
    claim(out, config, dragon, network=network.name, target=spec.name, tasks=[w.key for w in workloads],
          digest=digest(dragon), searches_from=reused and reused["from"])
    with Evaluator(spec, EvalConfig(measure=config.measure, seed=config.seed)) as evaluator:
        attempts, dragon_seconds = _dragon(workloads, spec, out, dragon, evaluator, config, progress)
        chosen = {DRAGON: _best_attempts(attempts)}
        seconds, measurements = {DRAGON: dragon_seconds}, {DRAGON: len(attempts)}
        for n in config.search_budgets(len(workloads)):
            system = tune_relax(n)
            chosen[system], measurements[system], seconds[system] = reused[system] if reused else _tune_relax(
                network, workloads, spec, out / system.replace("@", "-"), n, config, progress)
        write_atomic(out / "chosen.json", _dumps({system: {key: encode(plain) for key, plain in kernels.items()}
                                                  for system, kernels in chosen.items()}))
        tasks = _retime(workloads, chosen, attempts, evaluator, out / "tasks.json", progress)
        data = out / "network.npz"
        if not data.exists():
            reference_data(network, data, checks=config.checks, seed=config.seed, target=spec.tvm())
        systems = _networks(network, workloads, spec, chosen, evaluator, out, data, config, progress)
    systems = [replace(s, seconds=seconds.get(s.system), measurements=measurements.get(s.system, 0),
                       defaults=tuple(w.name for w in workloads if s.system != UNTUNED
                                      and w.key not in chosen.get(s.system, {}))) for s in systems]
    result = TuneResult(network.name, spec.name, {**asdict(config), "dragon": str(dragon),
                                                  "searches_from": reused and reused["from"]},
                        tasks, systems, str(out))
    write_atomic(out / "tune.json", _dumps(result.to_json()))
    from dragonlab.tune.page import write_html

    write_html(result, out / "tune.html")
    return result


# what decides a tune_relax search (beside the network's tasks, the target and the measurements per
# task, `TuneConfig.per_task`): reused only if equal
SEARCH_SETTINGS = ("budget", "population", "seed", "measure")
PER_TASK = "measurements per task"


def _searches(run: Path, network: Network, spec, workloads: list[Workload], config: TuneConfig) -> dict:
    """{tune_relax system: (kernels by task, measurements, seconds)} of another run, and "from": its
    path and the SHA-256 of its chosen.json. Refused, naming the file and what differs, unless
    it tuned the same network's tasks on the same target with the same search settings."""
    import hashlib

    files = {name: run / name for name in ("tune.json", "chosen.json")}
    for name, path in files.items():
        if not path.is_file():
            raise InputError(f"--searches-from {run}: no {name} (a finished `dragonlab tune` run directory)")
    try:
        result, chosen = read_json(files["tune.json"]), read_json(files["chosen.json"])
        systems = {s["system"]: s for s in result["systems"]}
        written = completed(TuneConfig, result["config"])  # a setting its tune.json predates had its default
        there = {"network": result["network"], "target": result["target"],
                 "tasks": sorted(t["key"] for t in result["tasks"]), PER_TASK: written["attempts"] + written["turns"],
                 **{k: written[k] for k in SEARCH_SETTINGS}}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{files['tune.json']}: not a tune result ({type(e).__name__}: {e})") from None
    mine = recorded(config)
    here = {"network": network.name, "target": spec.name, "tasks": sorted(w.key for w in workloads),
            PER_TASK: config.per_task, **{k: mine[k] for k in SEARCH_SETTINGS}}
    differ = [k for k in here if here[k] != there[k]]
    if differ:
        k = differ[0]
        raise InputError(f"--searches-from {run}: its {k} is {there[k]!r}, this run's {here[k]!r}, so its "
                         "searches are not this run's")
    reused = {"from": {"run": str(run), "chosen": hashlib.sha256(files["chosen.json"].read_bytes()).hexdigest()}}
    for n in config.search_budgets(len(workloads)):
        system = tune_relax(n)
        if system not in chosen or system not in systems:
            raise InputError(f"--searches-from {run}: no {system} in its tune.json and chosen.json")
        try:
            kernels = {key: decode(text, verbatim=False) for key, text in chosen[system].items()}
        except CodecError as e:
            raise InputError(f"{files['chosen.json']}: {system}: {e}") from None
        reused[system] = (kernels, systems[system]["measurements"], systems[system]["seconds"])
    return reused


def _dumps(d) -> str:
    import json

    return json.dumps(d, indent=1) + "\n"


def _dragon(workloads: list[Workload], spec, out: Path, dragon: Path, evaluator, config: TuneConfig,
            progress: bool) -> tuple[list, float | None]:
    """The model's attempts at every task, then its refinement turns, judged (`attempts.jsonl`,
    `turns.jsonl`, resumed), and the wall time they took (None when they were resumed). A turn is
    an attempt numbered after the task's `attempts`."""
    from dragonlab.evaluation.evaluate import Evaluation
    from dragonlab.learn.attempts import (Attempt, ModelWriter, best_attempts, judged, pending, read_turns,
                                          refine_in_turns, write_and_evaluate)
    from dragonlab.learn.prompts import CONSTRUCTION, construction_prompt, kernel_text

    path, turn_path, times = out / "attempts.jsonl", out / "turns.jsonl", out / "seconds.jsonl"
    by_key = {w.key: w for w in workloads}
    rows = [{"prompt": construction_prompt(kernel_text(w, config.prompt_form), spec.name), "workload": w.key,
             "task": CONSTRUCTION, "index": i, "name": w.name} for i, w in enumerate(workloads)]
    todo = pending(rows, SPLIT, path, config.attempts)
    turned = read_turns(turn_path)
    unturned = [row for row in rows if any((SPLIT, row["index"], t) not in turned for t in range(1, config.turns + 1))]
    if todo or unturned:
        from dragonlab.learn import models

        start = time.monotonic()
        model, tokenizer = models.load(dragon)
        # A kernel whose prompt fills the model's context gets nothing written: its attempts and
        # turns say so, and the task keeps TVM's default schedule (a network's largest fused
        # kernels can be longer than what a small model was trained on).
        room = getattr(model.config, "max_position_embeddings", None)
        lengths = {row["index"]: len(tokenizer(row["prompt"])["input_ids"]) for row in rows}
        full = [row for row in rows if room and lengths[row["index"]] >= room]

        def nothing(row) -> Evaluation:
            return Evaluation(row["workload"], spec.name, "decode", f"the prompt's {lengths[row['index']]} tokens "
                              f"fill the model's context of {room}: nothing was written")

        append_lines(path, (Attempt(SPLIT, row["index"], s, CONSTRUCTION, row["workload"], row["name"], "",
                                    nothing(row)).to_json()
                            for row in full if row in todo for s in range(config.attempts)))
        append_lines(turn_path, ({"split": SPLIT, "index": row["index"], "turn": t, "workload": row["workload"],
                                  "task": CONSTRUCTION, "script": "", "evaluation": nothing(row).to_json()}
                                 for row in full if row in unturned for t in range(1, config.turns + 1)
                                 if (SPLIT, row["index"], t) not in turned))
        fits = [row for row in rows if row not in full]
        batch = 8
        with ModelWriter(model, tokenizer, temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                         batch_size=batch, rows=fits, workloads=by_key, constrained=config.constrained) as writer:
            write_and_evaluate(writer, evaluator, rows, by_key, split=SPLIT, n=config.attempts, out=path,
                               seed=config.seed, per_batch=max(1, batch // config.attempts), progress=progress)
            if config.turns:
                best = best_attempts([a for group in judged(path, SPLIT, rows, config.attempts).values() for a in group],
                                     CONSTRUCTION, config.attempts)
                refine_in_turns(writer, evaluator, {(SPLIT, row["index"]): row for row in rows}, by_key,
                                {(SPLIT, row["index"]): best.get(row["workload"]) for row in rows}, turns=config.turns,
                                path=turn_path, seed=config.seed, progress=progress)
        if len(todo) == len(rows) and not turned:  # else resumed: its wall time is unknown
            append_lines(times, [{"system": DRAGON, "seconds": time.monotonic() - start}])
    seconds = dict(read_lines(times, lambda d: (d["system"], d["seconds"]))) if times.exists() else {}
    attempts = [a for group in judged(path, SPLIT, rows, config.attempts).values() for a in group]
    if config.turns:
        names = {row["index"]: row["name"] for row in rows}
        attempts += [Attempt(SPLIT, index, config.attempts + turn - 1, d["task"], d["workload"], names[index],
                             d["script"], Evaluation.from_json(d["evaluation"]))
                     for (_, index, turn), d in sorted(read_turns(turn_path).items()) if turn <= config.turns]
    return attempts, seconds.get(DRAGON)


def _tune_relax(network: Network, workloads: list[Workload], spec, root: Path, trials: int, config: TuneConfig,
                progress: bool) -> tuple[dict[str, list], int, float]:
    """MetaSchedule's `tune_relax` on the network with `trials` measurements in all, into `root`
    (its work directory: the JSONDatabase of every measured candidate, and its logs). Returns,
    per task, the plain trace of its fastest kernel (a task none of whose candidates ran has none),
    the candidates measured, and the wall time. The search does not resume: a run killed during
    it starts that search again, in a fresh directory renamed to `root` when it is done."""
    import tvm.s_tir.meta_schedule as ms
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from dragonlab.core import tensor_intrinsics
    from dragonlab.core.codec import to_plain
    from dragonlab.core.networks import lower_for_tuning
    from dragonlab.search.collect import quiet_metaschedule
    from dragonlab.search.measure import PooledBuilder, make_runner
    from dragonlab.search.records import MS_FAILURE_SECS

    @derived_object
    class Counter(PyMeasureCallback):  # moves the progress bar by each batch measured
        def __init__(self, bar):
            super().__init__()
            self.bar = bar

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            self.bar.update(len(runner_results))

    if not root.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
        target = spec.tvm()
        mod = lower_for_tuning(network.mod, target)  # as `network_workloads` lowers it
        quiet_metaschedule()  # its per-task logs stay in root/logs
        builder, runner = PooledBuilder(), make_runner("local", config.measure, env=spec.kernel_env)
        # each task's TuneContext is a clone, with a clone of this strategy
        strategy = ms.search_strategy.EvolutionarySearch(population_size=config.population)
        start = time.monotonic()
        try:
            with _foreign_handlers_set_aside(), tensor_intrinsics.for_target(target), \
                    progress_bar(total=trials, unit="cand", desc=f"{network.name} {root.name}", progress=progress) as bar:
                ms.relax_integration.tune_relax(
                    mod, {}, target, str(tmp), max_trials_global=trials, num_trials_per_iter=config.per_task,
                    builder=builder, runner=runner, strategy=strategy, seed=config.seed,
                    measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), Counter(bar)])
            write_atomic(tmp / "seconds.json", _dumps({"seconds": time.monotonic() - start}))
            tmp.rename(root)
        finally:
            builder.close()
            runner.close()
            shutil.rmtree(tmp, ignore_errors=True)
    db = ms.database.JSONDatabase(work_dir=str(root), allow_missing=False)
    target, best = spec.tvm(), {}
    for w in workloads:
        record = db.query_tuning_record(w.mod, target, "main")
        if record is not None and statistics.mean(float(t) for t in record.run_secs) < MS_FAILURE_SECS:
            best[w.key] = to_plain(record.trace)
    return best, len(db.get_all_tuning_records()), read_json(root / "seconds.json")["seconds"]


@contextlib.contextmanager
def _foreign_handlers_set_aside():
    """MetaSchedule's logger without the handlers that MetaSchedule did not attach, put back
    afterwards. `tune_relax` configures its loggers with `logging.config.dictConfig`, naming
    every handler already on its logger, and fails on one it did not configure itself: a user's
    own handler, or the one pytest attaches to every logger that does not propagate."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    ours = {f"{logger.name}.console", f"{logger.name}.file"}
    foreign = [h for h in logger.handlers if h.get_name() not in ours]
    for h in foreign:
        logger.removeHandler(h)
    try:
        yield
    finally:
        for h in foreign:
            logger.addHandler(h)


def _best_attempts(attempts: list) -> dict[str, list]:
    """Per task, the plain trace of the model's fastest correct kernel."""
    best: dict[str, tuple[float, list]] = {}
    for a in attempts:
        if a.evaluation.correct and a.evaluation.latency is not None:
            if a.workload not in best or a.evaluation.latency < best[a.workload][0]:
                try:
                    best[a.workload] = (a.evaluation.latency, decode(a.script, verbatim=False))
                except CodecError:  # judged correct, so it decoded then: a changed codec
                    continue
    return {key: trace for key, (_, trace) in best.items()}


def _retime(workloads: list[Workload], chosen: dict, attempts: list, evaluator, path: Path,
            progress: bool) -> list[TaskResult]:
    """Every chosen kernel timed again in one batch, beside each task's unscheduled kernel
    (`tasks.json`: kept, so a resumed run reports the same timings)."""
    if path.exists():
        return [TaskResult(**t) for t in read_json(path)]
    evaluator.clear_cache()  # the model's kernels were timed while it wrote: time them again here
    items = [(system, w) for w in workloads for system in chosen if w.key in chosen[system]]
    judged = evaluator.evaluate_many([(w, chosen[system][w.key]) for system, w in items], progress=progress)
    latency = {(system, w.key): e.latency for (system, w), e in zip(items, judged)}
    tasks = [TaskResult(w.key, w.name, w.weight, evaluator.reference_latency(w),
                        {system: latency.get((system, w.key)) for system in chosen},
                        sum(a.evaluation.correct for a in attempts if a.workload == w.key),
                        sum(a.workload == w.key for a in attempts)) for w in workloads]
    write_atomic(path, _dumps([asdict(t) for t in tasks]))
    return tasks


def _networks(network: Network, workloads: list[Workload], spec, chosen: dict, evaluator, out: Path, data: Path,
              config: TuneConfig, progress: bool) -> list[SystemResult]:
    """Each system's build of the network, checked, then timed (`networks.jsonl`: one line per
    system with what was measured; the rest of a SystemResult is derived).

    The builds are timed in turn, one repeat of each per round, so that a slow spell of the
    machine (seconds long, and as large as a microsecond network's differences) falls on every
    build alike rather than on whichever was timed during it. A run killed before its timings are
    written times every build not yet in the log again, together."""
    log = out / "networks.jsonl"
    done = {s.system: s for s in read_lines(log, lambda d: SystemResult(**{
        k: tuple(v) if k == "latencies" and v else v for k, v in d.items() if k in MEASURED}))} if log.exists() else {}
    systems = [UNTUNED, *chosen]
    todo = [s for s in systems if s not in done]
    mod_json = module_json(network.mod)
    checked = {}  # system -> (its build, max_error): ready to time
    with progress_bar(total=len(todo), unit="build", desc=f"{network.name} builds", progress=progress) as bar:
        for system in todo:
            database = None
            if system != UNTUNED and chosen[system]:
                database = _database(out / "databases" / system, workloads, chosen[system], spec, evaluator)
            built = _build_and_check(system, mod_json, database, spec, evaluator, out, data, config)
            if isinstance(built, SystemResult):  # it stopped before timing
                done[system] = built
                append_lines(log, [_measured(built)])
            else:
                checked[system] = built
            bar.update()
    timed = _time_in_turn(network.name, checked, spec, evaluator, data, config, progress)
    append_lines(log, [_measured(timed[s]) for s in checked])
    done.update(timed)
    return [done[s] for s in systems]


def _measured(result: SystemResult) -> dict:
    """What networks.jsonl keeps of a build's result."""
    return {k: v for k, v in asdict(result).items() if k in MEASURED}


def _database(path: Path, workloads: list[Workload], chosen: dict, spec, evaluator) -> Path:
    """The chosen kernels as a MetaSchedule JSONDatabase (written whole by a build worker)."""
    if path.is_dir():
        return path
    entries = [(module_json(w.mod), chosen[w.key], [1.0]) for w in workloads if w.key in chosen]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        (written,) = evaluator.pool.map(write_database, [(entries, spec.config, str(tmp))], timeout_sec=BUILD_SEC)
        if isinstance(written, (WorkerError, RemoteError)):
            raise UnavailableError(f"writing the database {path}: {one_line(written, typed=False)}")
        tmp.rename(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _build_and_check(system: str, mod_json: str, database: Path | None, spec, evaluator, out: Path, data: Path,
                     config: TuneConfig) -> tuple[Path, float | None] | SystemResult:
    """The system's build (`builds/<system>.so`, kept: a resumed run does not build it again)
    and the worst error of its outputs; or where it stopped, as a SystemResult."""
    artifact = out / "builds" / f"{system}.so"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    if not artifact.is_file():
        (built,) = evaluator.pool.map(build_network, [(mod_json, str(database) if database else None, spec.config,
                                                       str(artifact))], timeout_sec=BUILD_SEC)
        if isinstance(built, (WorkerError, RemoteError)):
            return SystemResult(system, "build", one_line(built, last=True, typed=False))
    (checked,) = evaluator.kernels.map(check_network, [(str(artifact), str(data), spec.config, config.checks)])
    if isinstance(checked, (WorkerError, RemoteError)):
        return SystemResult(system, "run", one_line(checked, last=True, typed=False))
    stage, reason, error = checked.get("stage"), checked.get("reason"), checked.get("max_error")
    if stage not in ("run", "check", "time") or not (error is None or type(error) is float):
        return SystemResult(system, "run", "the worker answered with malformed data")
    if stage != "time":
        return SystemResult(system, stage, str(reason)[:300], max_error=error)
    return artifact, error


def _time_in_turn(name: str, checked: dict, spec, evaluator, data: Path, config: TuneConfig,
                  progress: bool) -> dict[str, SystemResult]:
    """`config.measure.repeat` rounds, each timing one repeat of every build in `checked`
    (system -> (build, max_error)) in turn; a build whose timing fails stops at "time"."""
    m = config.measure
    latencies, stopped = {system: [] for system in checked}, {}
    with progress_bar(total=m.repeat * len(checked), unit="repeat", desc=f"{name} timing", progress=progress) as bar:
        for _ in range(m.repeat):
            for system, (artifact, _) in checked.items():
                if system not in stopped:
                    why = _time_once(artifact, latencies[system], spec, evaluator, data, m)
                    if why:
                        stopped[system] = why
                bar.update()
    return {system: SystemResult(system, "time", stopped[system], max_error=error) if system in stopped
            else SystemResult(system, "ok", None, tuple(latencies[system]), error)
            for system, (_, error) in checked.items()}


def _time_once(artifact: Path, latencies: list, spec, evaluator, data: Path, m) -> str | None:
    """One repeat of the build, appended to `latencies`; why not, when it failed."""
    try:
        with evaluator.timing_lock:
            timed = evaluator.timer.call(time_network, str(artifact), str(data), spec.config, m.number, 1,
                                         m.min_repeat_ms)
    except (WorkerError, RemoteError) as e:
        return one_line(e, last=True, typed=False)
    if not (isinstance(timed, list) and len(timed) == 1 and type(timed[0]) is float and 0 < timed[0] < math.inf):
        return "the timing process did not return latencies"
    latencies.append(timed[0])
    return None
