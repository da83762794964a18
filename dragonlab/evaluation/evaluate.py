"""The evaluator: what happened when a script met a workload, as one `Evaluation`.

Stages, in order (an Evaluation's `stage` is the one that stopped it, or "ok"):

    decode    the strict, bounded parser reads the script (here: it never executes text)
    validate  (here, first) the allowlist: only what MetaSchedule writes (`dragonlab.core.allowlist`)
    apply     the trace is replayed on a fresh schedule of the workload       (build worker)
    validate  the target's MetaSchedule post-processors accept it; VerifyGPUCode for cuda; the
              kernel calls no extern or packed function that the unscheduled kernel does not
    build     tvm.compile for the target, exported as a shared library
    run       the library runs on fresh random inputs                         (kernel worker)
    check     every buffer matches the unscheduled kernel on `checks` input sets
    time      the same library's latency with TVM's time_evaluator, in one timing process;
              `contention`: how many cores other processes kept busy meanwhile (a shared
              machine slows a timed kernel, up to 1000x for microsecond kernels on two threads)

Everything after decode runs in worker processes with hard time and memory limits
(`dragonlab.evaluation.workers`), in the functions of `dragonlab.evaluation.replay`: a SIGFPE
while applying, a hanging kernel or an allocation storm becomes an Evaluation of the stage it
happened in, never an exception in the caller. Build workers never
run a kernel; kernel workers and the timing process run kernels but cannot start a process,
create a file or open a socket (`dragonlab.evaluation.sandbox`). Workers answer with JSON, never pickles,
so a compromised worker can forge at most its own verdict, never run code in this process.
docs/security.md states the threat model.

What is built is what MetaSchedule itself would build: the script's design part (before
EnterPostproc), post-processed by the target's own post-processors, which are also the validity
check (`VerifyGPUCode` returns False without a message, and `tvm.compile` would still succeed).
A script must apply as written, post-processing part included; where what was built differs
from what was written, the Evaluation lists `repairs`:
- "decisions": TVM silently rewrote an illegal decision (a tile whose factors do not divide the
  loop, a compute location that does not exist), found by comparing the decisions the schedule
  took with the script's;
- "post-processing": the written post-processing part does not give the module the target's
  post-processors give (it was written for other decisions, or edited by hand).
A repaired attempt may run correctly, but it is not the script the model wrote: reports count
it both ways, and the reward charges for it. Nothing written after EnterPostproc is ever built,
so that part cannot smuggle unsafe primitives past validation.

The settings, `EvalConfig`, live in `dragonlab.evaluation.config` (no TVM import).
"""

from __future__ import annotations

import itertools
import math
import shutil
import statistics
import tempfile
import threading
import time
import uuid
import weakref
from collections import Counter, OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dragonlab.core import allowlist
from dragonlab.core.codec import CodecError, decode, to_plain
from dragonlab.core.progress import progress_bar
from dragonlab.core.targets import TargetSpec, get_target
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.replay import (arg_specs_of, build_reference, build_script, check_kernel, module_json,
                                        prepare_worker, reason_of, time_kernel)
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerError, WorkerPool, WorkerTimeout
from dragonlab.search.measure import make_runner, run_bounded
from dragonlab.search.records import trace_text

STAGES = ("decode", "apply", "validate", "build", "run", "check", "time")
OK = "ok"
CONTENDED = 0.25  # cores busy with other processes during a timing: a quarter of one slows a 2-thread kernel

@dataclass(frozen=True)
class Evaluation:
    workload: str  # Workload.key
    target: str
    stage: str  # the stage that stopped it (one of STAGES), or "ok"
    reason: str | None = None  # one line, when it stopped
    repairs: tuple[str, ...] = ()  # what was built differs from the script: "decisions", "post-processing"
    latencies: tuple[float, ...] | None = None  # seconds per repeat
    reference_latency: float | None = None  # seconds: the reference it is compared with
    max_error: float | None = None  # worst |out - ref| / tolerance over all checks (<= 1 passes)
    suspicious: bool = False  # speedup over the reference above the audit threshold
    # cores other processes kept busy while it (or the unscheduled kernel it is compared with) was
    # timed, the larger; at or above CONTENDED its latency is not to be trusted. None: not timed here
    contention: float | None = None

    @property
    def contended(self) -> bool:
        return self.contention is not None and self.contention >= CONTENDED

    @property
    def correct(self) -> bool:
        """Numerically correct: it got through the check (timing may still have failed)."""
        return self.stage in ("time", OK)

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)

    @property
    def exact(self) -> bool:
        """Correct and exactly the script that was written (no decision repaired)."""
        return self.correct and not self.repaired

    @property
    def latency(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def speedup(self) -> float | None:
        if self.latency and self.reference_latency:
            return self.reference_latency / self.latency
        return None

    @classmethod
    def from_json(cls, d: dict) -> "Evaluation":
        return cls(**{**d, "repairs": tuple(d.get("repairs") or ()),
                      "latencies": tuple(d["latencies"]) if d.get("latencies") else None})

    def to_json(self) -> dict:
        d = asdict(self)
        d["latencies"] = list(self.latencies) if self.latencies else None
        d["repairs"] = list(self.repairs)
        return d


class BusyCores:
    """Cores that processes other than `worker` (the timing process) kept busy during a block:
    the machine's busy CPU time (/proc/stat: all but idle and iowait, steal included: a host
    lending this VM's cores to others slows it too) less the worker's, over the block's wall
    time. Resolution is the kernel's tick (10 ms), so blocks of a few hundred ms read to about
    0.05 of a core. `others` is None where the counters cannot be read."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.others: float | None = None

    def __enter__(self) -> "BusyCores":
        self._pid = self.worker.pid
        self._start = (time.perf_counter(), _busy_seconds(), _cpu_seconds(self._pid))
        return self

    def __exit__(self, *exc) -> None:
        wall0, busy0, own0 = self._start
        wall, busy, pid = time.perf_counter() - wall0, _busy_seconds(), self.worker.pid
        own = _cpu_seconds(pid)
        if busy is None or busy0 is None or own is None or wall <= 0:
            return
        # a worker started (or restarted) inside the block: all of its CPU time was spent in it
        own -= own0 if pid == self._pid and own0 is not None else 0.0
        self.others = round(max(0.0, (busy - busy0 - own) / wall), 3)


def _busy_seconds() -> float | None:
    import psutil

    try:
        t = psutil.cpu_times()
    except OSError:
        return None
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _cpu_seconds(pid: int | None) -> float | None:
    import psutil

    if pid is None:
        return 0.0
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return t.user + t.system + t.children_user + t.children_system


class Evaluator:
    """Evaluates scripts on one target; reuse it: workers, references and results are cached.

    Every latency measured on this machine is measured while holding `timing_lock`. Work that
    would share its cores with a timed kernel (a model writing the next scripts while this batch
    is built) holds the same lock, so that no kernel is timed beside it."""

    def __init__(self, target: str | TargetSpec = "cpu", config: EvalConfig = EvalConfig()):
        import psutil

        self.target = get_target(target) if isinstance(target, str) else target
        self.config = config
        limits = Limits(timeout_sec=config.timeout_sec, memory_bytes=int(config.memory_gb * (1 << 30)))
        n = config.workers or psutil.cpu_count(logical=False) or 1
        self.pool = WorkerPool(n, limits, setup=(prepare_worker, (self.target.config,)))
        # Inherited, OMP_NUM_THREADS would decide the threads a kernel runs (and is timed) on: up
        # to 29x apart for microsecond kernels. Kernels run on the cores the target declares.
        env = self.target.kernel_env
        # TVM's thread pool spins after each parallel job before it sleeps: the workers that check
        # kernels must not spin on the cores the next timing needs (they need no speed)
        self.kernels = WorkerPool(n, limits, sandbox=True, env={**env, "TVM_THREAD_POOL_SPIN_COUNT": "0"})
        self.timer = Worker(Limits(timeout_sec=config.measure.run_timeout_sec, memory_bytes=limits.memory_bytes),
                            sandbox=True, env=env)
        self.rpc = (make_runner("rpc", config.measure, tracker=config.tracker, key=config.key)
                    if config.runner == "rpc" else None)
        self._dir = Path(tempfile.mkdtemp(prefix="dragonlab-eval-"))
        # removed by close(), or at the latest when the evaluator is collected or Python exits
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self._cache: OrderedDict[tuple, tuple[Evaluation, Evaluation | None]] = OrderedDict()  # (as measured, against the unscheduled kernel)
        self._references: dict[str, float | None] = {}
        self._reference_contention: dict[str, float | None] = {}
        self.timing_lock = threading.Lock()

    def evaluate(self, workload: Workload, script, *, reference_latency: float | None = None) -> Evaluation:
        return self.evaluate_many([(workload, script)], reference_latencies=[reference_latency], progress=False)[0]

    def evaluate_many(self, items: list[tuple[Workload, object]], *, reference_latencies: list | None = None,
                      progress: bool = True) -> list[Evaluation]:
        """One Evaluation per (workload, script) pair, in order. A script is text (decoded here)
        or a trace's plain JSON form (from a record). `reference_latencies[i]`, when given, is
        what item i's speedup is measured against; otherwise the unscheduled kernel's latency."""
        refs = reference_latencies or [None] * len(items)
        self._references.clear()  # unscheduled references are timed in the same batch as the candidates
        self._reference_contention.clear()
        results, pending, plains = self._admit(items)
        for key in list(pending):
            if key in self._cache:
                for i in pending.pop(key):
                    results[i] = self._against(items[i][0], key, refs[i])
        keys = list(pending)
        by_key = {key: items[pending[key][0]][0] for key in keys}
        bar = progress_bar(total=len(keys) * (3 if self.config.time else 2), unit="step", progress=progress)
        with bar, self._built(keys, by_key, plains, bar) as (evaluations, artifacts):
            for k in keys:
                evaluation = evaluations[k]
                if evaluation.stage == "time" and self.config.time:
                    evaluation = self._time(evaluation, artifacts[k], arg_specs_of(by_key[k].mod))
                elif evaluation.stage == "time":
                    evaluation = replace(evaluation, stage=OK)
                bar.update(1 if self.config.time else 0)
                self._remember(k, evaluation)
                for i in pending[k]:
                    results[i] = self._against(by_key[k], k, refs[i])
        return results  # type: ignore[return-value]

    def time_together(self, groups: list[tuple[Workload, list]], *, rounds: int = 3,
                      progress: bool = True) -> list[list[tuple[float, ...] | None]]:
        """Latencies of kernels that are to be compared, timed side by side: per group (a workload
        and its scripts), per script, one latency per round (the median of its repeats), or None
        for a script that is not correct (judge it with `evaluate_many` to learn why). A group's
        kernels are timed in turn in one timing process, in reverse order every other round, all
        rounds together under `timing_lock`: they are timed within a second of each other, so a
        slow state of the machine that lasts longer (on a 2-core VM, microsecond kernels on two
        threads ran 2x to 5x slower for seconds after the cores had idled) slows them alike, and
        their ratio per round is steadier than latencies timed minutes apart. A script listed twice
        is timed twice (the same kernel against itself: the noise of this protocol)."""
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        items = [(w, script) for w, scripts in groups for script in scripts]
        _, pending, plains = self._admit(items)
        keys = list(pending)
        by_key = {key: items[pending[key][0]][0] for key in keys}
        key_of = {i: key for key, where in pending.items() for i in where}
        starts = list(itertools.accumulate((len(scripts) for _, scripts in groups), initial=0))
        timed: dict[int, tuple[float, ...] | None] = {}
        bar = progress_bar(total=len(keys) * 2 + len(groups), unit="step", progress=progress)
        with bar, self._built(keys, by_key, plains, bar) as (evaluations, artifacts):
            for (w, scripts), start in zip(groups, starts):
                slots = [i for i in range(start, start + len(scripts))
                         if i in key_of and evaluations[key_of[i]].stage == "time"]
                per_round: dict[int, list[float]] = {i: [] for i in slots}
                specs = arg_specs_of(w.mod)
                with self.timing_lock:
                    for r in range(rounds):
                        for i in (slots if r % 2 == 0 else slots[::-1]):
                            t = self._measure(artifacts[key_of[i]], specs)
                            per_round[i].append(statistics.median(t) if isinstance(t, list) else math.nan)
                timed.update({i: tuple(ts) if all(t > 0 for t in ts) else None for i, ts in per_round.items()})
                bar.update()
        return [[timed.get(i) for i in range(start, start + len(scripts))] for (_, scripts), start in zip(groups, starts)]

    def _admit(self, items: list[tuple[Workload, object]]):
        """(results, pending, plains): each item decoded and checked against the allowlist (a
        refused item's Evaluation in `results`, the rest None), the admitted ones grouped by what
        is built (`pending[key]`: their positions; `plains[key]`: the trace's plain form)."""
        results: list[Evaluation | None] = [None] * len(items)
        pending: dict[tuple, list[int]] = {}
        plains: dict[tuple, list] = {}
        for i, (w, script) in enumerate(items):
            try:
                plain = decode(script, verbatim=False) if isinstance(script, str) else to_plain(script)
            except CodecError as e:
                results[i] = Evaluation(w.key, self.target.name, "decode", reason_of(e))
                continue
            # Refused here, before any worker: what MetaSchedule never writes (and what would
            # crash a worker, whose restart costs its 20-60 s setup).
            refused = allowlist.refusal(plain, self.target.kind)
            if refused:
                results[i] = Evaluation(w.key, self.target.name, "validate", refused)
                continue
            key = (w.key, self.target.name, trace_text(plain))
            pending.setdefault(key, []).append(i)
            plains[key] = plain
        return results, pending, plains

    @contextmanager
    def _built(self, keys: list[tuple], by_key: dict, plains: dict, bar):
        """(evaluations, artifacts) of `keys`, each built and checked: an evaluation at stage
        "time" is correct and its library lies at `artifacts[key]` until the block ends."""
        mod_jsons = {w.key: module_json(w.mod) for w in by_key.values()}  # one serialisation per workload
        artifacts = {key: str(self._dir / f"{uuid.uuid4().hex}.so") for key in keys}  # named here, never by a worker
        try:
            outcomes = self.pool.map(build_script, [
                (by_key[k].key, mod_jsons[by_key[k].key], self.target.config, plains[k], self._job_config(),
                 artifacts[k]) for k in keys], on_result=lambda *_: bar.update())
            evaluations = {k: _evaluation_of(by_key[k].key, self.target.name, o) for k, o in zip(keys, outcomes)}
            built = [k for k in keys if evaluations[k].stage == "run" and evaluations[k].reason is None]
            bar.update(len(keys) - len(built))
            checked = self.kernels.map(check_kernel, [
                (by_key[k].key, mod_jsons[by_key[k].key], self.target.config, artifacts[k], self._job_config())
                for k in built], on_result=lambda *_: bar.update())
            for k, outcome in zip(built, checked):
                evaluations[k] = _evaluation_of(by_key[k].key, self.target.name, outcome, evaluations[k].repairs)
            yield evaluations, artifacts
        finally:
            for artifact in artifacts.values():
                Path(artifact).unlink(missing_ok=True)

    def reference_latency(self, workload: Workload) -> float | None:
        """Median latency of the unscheduled kernel, measured once per workload and batch."""
        if workload.key not in self._references:
            artifact = str(self._dir / f"ref-{uuid.uuid4().hex}.so")
            outcome = self.pool.map(build_reference, [(workload.key, module_json(workload.mod), self.target.config,
                                                       artifact)])[0]
            latency = contention = None
            if not isinstance(outcome, Exception):
                timed, contention = self._time_artifact(artifact, arg_specs_of(workload.mod))
                latency = statistics.median(timed) if isinstance(timed, list) else None
            Path(artifact).unlink(missing_ok=True)
            self._references[workload.key] = latency
            self._reference_contention[workload.key] = contention
        return self._references[workload.key]

    def unscheduled_latency(self, workload: Workload) -> float | None:
        """The unscheduled kernel's latency timed now, not the batch's cached one (a calibration)."""
        self._references.pop(workload.key, None)
        self._reference_contention.pop(workload.key, None)
        return self.reference_latency(workload)

    def _time(self, evaluation: Evaluation, artifact: str, arg_specs: list) -> Evaluation:
        """Time the library that was checked: the same file, not a rebuild."""
        timed, contention = self._time_artifact(artifact, arg_specs)
        if not isinstance(timed, list):
            return replace(evaluation, stage="time", reason=timed)
        return replace(evaluation, stage=OK, latencies=tuple(timed), contention=contention)

    def _against(self, w: Workload, key: tuple, reference: float | None) -> Evaluation:
        """The cached evaluation of `key` against `reference` (seconds), or against the
        unscheduled kernel. The cache holds what does not depend on the reference, so the same
        script gets each caller's reference, whatever came before it; the result against the
        unscheduled kernel (timed in the batch that first asked for it) is kept beside it."""
        evaluation, against_unscheduled = self._cache[key]
        if evaluation.latency is None:
            return evaluation
        if reference is None and against_unscheduled is not None:
            return against_unscheduled
        result = replace(evaluation, reference_latency=reference if reference is not None
                         else self.reference_latency(w))
        if reference is None and self._reference_contention.get(w.key) is not None:
            result = replace(result, contention=max(result.contention or 0.0, self._reference_contention[w.key]))
        speedup = result.speedup
        result = replace(result, suspicious=bool(speedup and speedup > self.config.suspicious_speedup))
        if reference is None:
            self._cache[key] = (evaluation, result)
        return result

    def _time_artifact(self, artifact: str, arg_specs: list) -> tuple[list[float] | str, float | None]:
        """(seconds per repeat or why not, the cores other processes kept busy meanwhile: None
        on a remote runner, whose machine this one cannot see)."""
        with self.timing_lock:
            if self.rpc is not None:
                return self._measure(artifact, arg_specs), None
            with BusyCores(self.timer) as busy:
                timed = self._measure(artifact, arg_specs)
            return timed, busy.others

    def _measure(self, artifact: str, arg_specs: list) -> list[float] | str:
        """Seconds per repeat, or why not; the caller holds `timing_lock`."""
        m = self.config.measure
        if self.rpc is not None:
            from tvm.s_tir.meta_schedule.arg_info import TensorInfo
            from tvm.s_tir.meta_schedule.runner import RunnerInput

            infos = [TensorInfo(dtype, shape) for shape, dtype in arg_specs]
            (r,) = run_bounded(self.rpc, [RunnerInput(artifact, self.target.device_type, infos)], m.run_timeout_sec)
            if r.error_msg is not None:  # the runner reports the remote failure as text
                return f"timing: {reason_of(RemoteError(r.error_msg))}"
            return [float(s) for s in r.run_secs]
        try:
            timed = self.timer.call(time_kernel, artifact, arg_specs, m.number, m.repeat, m.min_repeat_ms)
        except WorkerError as e:
            return f"timing: {e}"
        except RemoteError as e:
            return f"timing: {reason_of(e)}"
        if not (isinstance(timed, list) and timed and all(type(t) is float and 0 < t < math.inf for t in timed)):
            return "timing: the timing process did not return latencies"
        return timed

    def _job_config(self) -> dict:
        return {"checks": self.config.checks, "seed": self.config.seed, "nvcc": self.config.nvcc}

    def _remember(self, key: tuple, evaluation: Evaluation) -> None:
        self._cache[key] = (evaluation, None)
        while len(self._cache) > max(1, self.config.cache_size):
            self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget every evaluation: the next ones are judged and timed again (noise estimates)."""
        self._cache.clear()

    def worker_pids(self) -> list[int]:
        return self.pool.pids() + self.kernels.pids() + ([self.timer.pid] if self.timer.pid else [])

    def close(self) -> None:
        self.pool.close()
        self.kernels.close()
        self.timer.close()
        self._remove_dir()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class RecordCheck:
    """Records re-evaluated: how many are correct now, and how their latency compares."""

    evaluations: list[Evaluation]
    correct: int
    total: int
    latency_ratio: float | None  # median of (latency now / latency recorded) over ok, correct records
    stages: dict[str, int]


def evaluate_records(evaluator: "Evaluator", workloads: dict[str, Workload], records: list,
                     *, progress: bool = True) -> RecordCheck:
    """Evaluate every record of the evaluator's target whose workload is known."""
    from dragonlab.search.records import OK as RECORDED_OK

    chosen = [r for r in records if r.target == evaluator.target.name and r.workload in workloads]
    evaluations = evaluator.evaluate_many([(workloads[r.workload], r.trace) for r in chosen], progress=progress)
    ratios = [e.latency / r.latency for r, e in zip(chosen, evaluations)
              if r.status == RECORDED_OK and e.correct and e.latency]
    return RecordCheck(evaluations, sum(e.correct for e in evaluations), len(evaluations),
                       statistics.median(ratios) if ratios else None, dict(Counter(e.stage for e in evaluations)))


def check_store(evaluator: "Evaluator", store, *, workloads: list[str] | None = None,
                per_workload: int | None = None, chunk: int = 32, progress: bool = True) -> Counter:
    """Judge a record store's unchecked ok records of the evaluator's target (of the `workloads`
    keys, or all) with the evaluator's check, and append each verdict to the store
    (`RecordStore.add_checks`), a chunk at a time: a kill loses at most the chunk in flight, and a
    rerun goes on with what is not checked yet. `per_workload`: only the N fastest ok records of
    each workload (the ones datasets and search baselines lean on most), the checked ones
    included. Returns the new verdicts' statuses, counted; an evaluation stopped by time stores
    no verdict."""
    from dragonlab.search.records import OK as RECORDED_OK
    from dragonlab.search.records import check_of

    known = store.workloads()
    checked = set(store.checks())
    chosen = []
    by_workload: dict[str, list] = {}
    for r in store.records(target=evaluator.target.name, checked=False):
        if r.status == RECORDED_OK and r.workload in known and (workloads is None or r.workload in workloads):
            by_workload.setdefault(r.workload, []).append(r)
    for key in sorted(by_workload, key=lambda k: known[k].name):  # one workload's records together: one reference
        rs = sorted(by_workload[key], key=lambda r: (r.latency, trace_text(r.trace)))[:per_workload]
        chosen.extend(r for r in rs if r.digest not in checked)
    counts: Counter = Counter()
    bar = progress_bar(total=len(chosen), unit="record", progress=progress)
    try:
        for start in range(0, len(chosen), chunk):
            part = chosen[start:start + chunk]
            evaluations = evaluator.evaluate_many([(known[r.workload], r.trace) for r in part], progress=False)
            verdicts = [check_of(r, e.stage, e.reason, e.max_error) for r, e in zip(part, evaluations)]
            store.add_checks(v for v in verdicts if v is not None)
            counts.update(v.status if v is not None else "not judged (time)" for v in verdicts)
            bar.update(len(part))
            bar.set_postfix({k: v for k, v in sorted(counts.items())})
    finally:
        bar.close()
    return counts


def _evaluation_of(key: str, target: str, outcome, repairs: tuple = ()) -> Evaluation:
    """The Evaluation of a worker's answer, which is data from a process that ran untrusted work:
    its fields are checked, never trusted for their types."""
    if isinstance(outcome, WorkerError):
        stage = outcome.stage if outcome.stage in STAGES else "apply"
        kind = "timed out" if isinstance(outcome, WorkerTimeout) else "crashed"
        return Evaluation(key, target, stage, f"worker {kind} during {stage}: {outcome}", repairs)
    if isinstance(outcome, RemoteError):  # a bug of ours, or of TVM's, surfacing in the worker
        stage = outcome.stage if outcome.stage in STAGES else "apply"
        return Evaluation(key, target, stage, f"internal error during {stage}: {reason_of(outcome)}", repairs)
    malformed = Evaluation(key, target, "run", "the worker answered with malformed data", repairs)
    if not isinstance(outcome, dict):
        return malformed
    stage, reason, max_error = outcome.get("stage"), outcome.get("reason"), outcome.get("max_error")
    found = outcome.get("repairs", list(repairs))
    if (stage not in STAGES or not (reason is None or isinstance(reason, str))
            or not (isinstance(found, list) and all(r in ("decisions", "post-processing") for r in found))
            or not (max_error is None or type(max_error) is float)):
        return malformed
    return Evaluation(key, target, stage, reason and reason[:300], tuple(found), max_error=max_error)
