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
    time      the same library's latency with TVM's time_evaluator, in one timing process

Everything after decode runs in worker processes with hard time and memory limits
(`dragonlab.evaluation.workers`): a SIGFPE while applying, a hanging kernel or an allocation storm becomes
an Evaluation of the stage it happened in, never an exception in the caller. Build workers never
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
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from dragonlab.core import allowlist
from dragonlab.core.codec import CodecError, apply, decode, design_part, to_plain
from dragonlab.core.progress import progress_bar
from dragonlab.core.targets import TargetSpec, get_target
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerError, WorkerPool, WorkerTimeout
from dragonlab.search.measure import MeasureConfig, make_runner, run_bounded
from dragonlab.search.records import trace_text

STAGES = ("decode", "apply", "validate", "build", "run", "check", "time")
OK = "ok"

# Per-dtype tolerance: |out - ref| <= rtol * |ref| + atol * max |ref|. Scaling atol by the
# output's magnitude matters: plain relative error is useless near zero (a correct conv2d
# reached 0.15), and fp32 reductions reorder sums (6.7e-4 absolute on sums of magnitude ~500).
# No floor of 1 on the scale: with one, a softmax (outputs ~0.016) computed in fp16 passed the
# fp32 check; without it the worst of 52 random correct samples used 0.3% of the tolerance.
TOLERANCES = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2),
              "bfloat16": (5e-2, 5e-2)}


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


@dataclass(frozen=True)
class EvalConfig:
    checks: int = field(default=3, metadata={"help": "fresh random input sets compared with the reference"})
    seed: int = field(default=0, metadata={"help": "seed of the random inputs"})
    workers: int | None = field(default=None, metadata={"help": "worker processes; None = physical cores"})
    timeout_sec: float = field(default=60.0, metadata={"help": "limit for apply..check of one script"})
    memory_gb: float = field(default=8.0, metadata={"help": "address-space limit of each worker"})
    time: bool = field(default=True, metadata={"help": "measure latency of correct kernels"})
    measure: MeasureConfig = MeasureConfig()
    suspicious_speedup: float = field(default=10.0, metadata={"help": "flag speedups over the reference above this"})
    nvcc: bool = field(default=False, metadata={"help": "compile generated CUDA with nvcc (no GPU needed)"})
    cache_size: int = field(default=100_000, metadata={"help": "evaluations remembered by (workload, target, trace)"})
    runner: str = field(default="local", metadata={"help": "time on this machine ('local') or through TVM's RPC tracker ('rpc')"})
    tracker: str | None = field(default=None, metadata={"help": "HOST:PORT of the RPC tracker"})
    key: str | None = field(default=None, metadata={"help": "device key at the tracker"})


class Evaluator:
    """Evaluates scripts on one target; reuse it: workers, references and results are cached."""

    def __init__(self, target: str | TargetSpec = "cpu", config: EvalConfig = EvalConfig()):
        import psutil

        self.target = get_target(target) if isinstance(target, str) else target
        self.config = config
        limits = Limits(timeout_sec=config.timeout_sec, memory_bytes=int(config.memory_gb * (1 << 30)))
        n = config.workers or psutil.cpu_count(logical=False) or 1
        self.pool = WorkerPool(n, limits, setup=(prepare_worker, (self.target.config,)))
        self.kernels = WorkerPool(n, limits, sandbox=True)
        self.timer = Worker(Limits(timeout_sec=config.measure.run_timeout_sec, memory_bytes=limits.memory_bytes),
                            sandbox=True)
        self.rpc = (make_runner("rpc", config.measure, tracker=config.tracker, key=config.key)
                    if config.runner == "rpc" else None)
        self._dir = Path(tempfile.mkdtemp(prefix="dragonlab-eval-"))
        self._cache: OrderedDict[tuple, tuple[Evaluation, Evaluation | None]] = OrderedDict()  # (as measured, against the unscheduled kernel)
        self._references: dict[str, float | None] = {}

    def evaluate(self, workload: Workload, script, *, reference_latency: float | None = None) -> Evaluation:
        return self.evaluate_many([(workload, script)], reference_latencies=[reference_latency], progress=False)[0]

    def evaluate_many(self, items: list[tuple[Workload, object]], *, reference_latencies: list | None = None,
                      progress: bool = True) -> list[Evaluation]:
        """One Evaluation per (workload, script) pair, in order. A script is text (decoded here)
        or a trace's plain JSON form (from a record). `reference_latencies[i]`, when given, is
        what item i's speedup is measured against; otherwise the unscheduled kernel's latency."""
        refs = reference_latencies or [None] * len(items)
        self._references.clear()  # unscheduled references are timed in the same batch as the candidates
        results: list[Evaluation | None] = [None] * len(items)
        pending: dict[tuple, list[int]] = {}
        plains: dict[tuple, list] = {}
        for i, (w, script) in enumerate(items):
            try:
                plain = decode(script, verbatim=False) if isinstance(script, str) else to_plain(script)
            except CodecError as e:
                results[i] = Evaluation(w.key, self.target.name, "decode", _one_line(e))
                continue
            # Refused here, before any worker: what MetaSchedule never writes (and what would
            # crash a worker, whose restart costs its 20-60 s setup).
            refused = allowlist.refusal(plain, self.target.kind)
            if refused:
                results[i] = Evaluation(w.key, self.target.name, "validate", refused)
                continue
            key = (w.key, self.target.name, trace_text(plain))
            if key in self._cache:
                results[i] = self._against(w, key, refs[i])
                continue
            pending.setdefault(key, []).append(i)
            plains[key] = plain

        keys = list(pending)
        bar = progress_bar(total=len(keys) * (3 if self.config.time else 2), unit="step", progress=progress)
        by_key = {key: items[pending[key][0]][0] for key in keys}
        module_json = {w.key: _module_json(w) for w in by_key.values()}  # one serialisation per workload
        artifacts = {key: str(self._dir / f"{uuid.uuid4().hex}.so") for key in keys}  # named here, never by a worker
        try:
            outcomes = self.pool.map(build_script, [
                (by_key[k].key, module_json[by_key[k].key], self.target.config, plains[k], self._job_config(),
                 artifacts[k]) for k in keys], on_result=lambda *_: bar.update())
            evaluations = {k: _evaluation_of(by_key[k].key, self.target.name, o) for k, o in zip(keys, outcomes)}
            built = [k for k in keys if evaluations[k].stage == "run" and evaluations[k].reason is None]
            bar.update(len(keys) - len(built))
            checked = self.kernels.map(check_kernel, [
                (by_key[k].key, module_json[by_key[k].key], self.target.config, artifacts[k], self._job_config())
                for k in built], on_result=lambda *_: bar.update())
            for k, outcome in zip(built, checked):
                evaluations[k] = _evaluation_of(by_key[k].key, self.target.name, outcome, evaluations[k].repairs)
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
        finally:
            for artifact in artifacts.values():
                Path(artifact).unlink(missing_ok=True)
            bar.close()
        return results  # type: ignore[return-value]

    def reference_latency(self, workload: Workload) -> float | None:
        """Median latency of the unscheduled kernel, measured once per workload and batch."""
        if workload.key not in self._references:
            artifact = str(self._dir / f"ref-{uuid.uuid4().hex}.so")
            outcome = self.pool.map(build_reference, [(workload.key, _module_json(workload), self.target.config,
                                                       artifact)])[0]
            latency = None
            if not isinstance(outcome, Exception):
                timed = self._time_artifact(artifact, arg_specs_of(workload.mod))
                latency = statistics.median(timed) if isinstance(timed, list) else None
            Path(artifact).unlink(missing_ok=True)
            self._references[workload.key] = latency
        return self._references[workload.key]

    def _time(self, evaluation: Evaluation, artifact: str, arg_specs: list) -> Evaluation:
        """Time the library that was checked: the same file, not a rebuild."""
        timed = self._time_artifact(artifact, arg_specs)
        if not isinstance(timed, list):
            return replace(evaluation, stage="time", reason=timed)
        return replace(evaluation, stage=OK, latencies=tuple(timed))

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
        speedup = result.speedup
        result = replace(result, suspicious=bool(speedup and speedup > self.config.suspicious_speedup))
        if reference is None:
            self._cache[key] = (evaluation, result)
        return result

    def _time_artifact(self, artifact: str, arg_specs: list) -> list[float] | str:
        m = self.config.measure
        if self.rpc is not None:
            from tvm.s_tir.meta_schedule.arg_info import TensorInfo
            from tvm.s_tir.meta_schedule.runner import RunnerInput

            infos = [TensorInfo(dtype, shape) for shape, dtype in arg_specs]
            (r,) = run_bounded(self.rpc, [RunnerInput(artifact, self.target.device_type, infos)], m.run_timeout_sec)
            return [float(s) for s in r.run_secs] if r.error_msg is None else f"timing: {_one_line(r.error_msg)}"
        try:
            timed = self.timer.call(time_kernel, artifact, arg_specs, m.number, m.repeat, m.min_repeat_ms)
        except WorkerError as e:
            return f"timing: {e}"
        except RemoteError as e:
            return f"timing: {_one_line(e)}"
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
        shutil.rmtree(self._dir, ignore_errors=True)

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
    from collections import Counter

    from dragonlab.search.records import OK as RECORDED_OK

    chosen = [r for r in records if r.target == evaluator.target.name and r.workload in workloads]
    evaluations = evaluator.evaluate_many([(workloads[r.workload], r.trace) for r in chosen], progress=progress)
    ratios = [e.latency / r.latency for r, e in zip(chosen, evaluations)
              if r.status == RECORDED_OK and e.correct and e.latency]
    return RecordCheck(evaluations, sum(e.correct for e in evaluations), len(evaluations),
                       statistics.median(ratios) if ratios else None, dict(Counter(e.stage for e in evaluations)))


def _one_line(e) -> str:
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


def _module_json(w: Workload) -> str:
    import tvm

    return tvm.ir.save_json(w.mod)


def arg_specs_of(mod) -> list:
    """[(shape, dtype), ...] of a module's main function: picklable, for the worker processes."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return [([int(d) for d in a.shape], str(a.dtype)) for a in ArgInfo.from_prim_func(mod["main"])]


def _evaluation_of(key: str, target: str, outcome, repairs: tuple = ()) -> Evaluation:
    """The Evaluation of a worker's answer, which is data from a process that ran untrusted work:
    its fields are checked, never trusted for their types."""
    if isinstance(outcome, WorkerError):
        stage = outcome.stage if outcome.stage in STAGES else "apply"
        kind = "timed out" if isinstance(outcome, WorkerTimeout) else "crashed"
        return Evaluation(key, target, stage, f"worker {kind} during {stage}: {outcome}", repairs)
    if isinstance(outcome, RemoteError):  # a bug of ours, or of TVM's, surfacing in the worker
        stage = outcome.stage if outcome.stage in STAGES else "apply"
        return Evaluation(key, target, stage, f"internal error during {stage}: {_one_line(outcome)}", repairs)
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


# ---- what runs in the worker processes ----------------------------------------------------------
# Module-level so that worker processes import them by reference. Caches live per worker.

_POSTPROCS: dict[str, list] = {}
_REFERENCES: OrderedDict = OrderedDict()
_ESCAPES: dict[str, set[str]] = {}


def worker_module(key: str, mod_json: str):
    """A fresh copy of the workload's module for every use (2 ms). TVM 0.27 schedules can change
    the module they were made from: after `get root; ann b0 tiling "SSRSRS"; children b0 >2;
    loops b1 >4; fuse l4..5` on the quick depthwise conv2d, a new Schedule of the same module
    object finds 3 loops where there were 4. A cached module made verdicts depend on what the
    worker had evaluated before. The JSON comes from this TVM, so `tvm.ir.load_json`'s version
    upgrade is skipped (0.15 ms instead of 1.1 ms; constrain.py loads one per replayed line)."""
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(mod_json)


def _postprocs(target_config: dict) -> list:
    """The target's default MetaSchedule post-processors, initialised for it (cached)."""
    import json

    name = json.dumps(target_config, sort_keys=True)
    if name not in _POSTPROCS:
        from tvm import te
        from tvm.target import Target

        from dragonlab.search.explore import tune_context

        a = te.placeholder((1,), name="a")
        dummy = te.create_prim_func([a, te.compute((1,), lambda i: a[i], name="b")])
        ctx = tune_context(dummy, Target(target_config), task_name="validate")
        _POSTPROCS[name] = list(ctx.space_generator.postprocs)
    return _POSTPROCS[name]


def _unscheduled_escapes(key: str, mod_json: str) -> set[str]:
    """What the unscheduled module already reaches outside itself (cached per workload)."""
    if key not in _ESCAPES:
        _ESCAPES[key] = allowlist.escapes(worker_module(key, mod_json))
    return _ESCAPES[key]


def prepare_worker(target_config: dict, *, progress) -> None:
    """A fresh worker's one-off work: the target's post-processors (for a target with tensor
    intrinsics, TVM's 16-60 s import of them), so that no script is charged for it."""
    progress("setup")
    _postprocs(target_config)


def _random_args(arg_specs: list, seed: int) -> list:
    """numpy arrays for [(shape, dtype), ...]: floats uniform in [-1, 1], everything else in {0, 1}
    (indices and masks: small non-negative values stay in range for gathers)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in arg_specs:
        if dtype.startswith("float") or dtype == "bfloat16":
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        else:
            out.append(rng.integers(0, 2, size=shape).astype(bool if dtype == "bool" else dtype))
    return out


def _run(func, arrays: list) -> list:
    """Run on copies of `arrays` (every buffer, inputs included, starts from the same random
    contents: a kernel that skips writing part of an output cannot match the reference)."""
    import tvm

    tensors = [tvm.runtime.tensor(a.copy()) for a in arrays]
    func(*tensors)
    return [t.numpy() for t in tensors]


def _reference_outputs(key: str, mod, target, checks: int, seed: int) -> list[tuple[list, list]]:
    cache_key = (key, str(target), checks, seed)
    if cache_key not in _REFERENCES:
        from dragonlab.search.measure import fast_build

        func = fast_build(mod, target)["main"]
        sets = []
        for s in range(checks):
            inputs = _random_args(arg_specs_of(mod), seed * 1000 + s)
            sets.append((inputs, _run(func, inputs)))
        _REFERENCES[cache_key] = sets
        while len(_REFERENCES) > 8:
            _REFERENCES.popitem(last=False)
    return _REFERENCES[cache_key]


def _compare(out, ref) -> float:
    """Worst |out - ref| / tolerance; inf for a shape/dtype mismatch or a NaN where ref has none."""
    import numpy as np

    if out.shape != ref.shape:
        return float("inf")
    dtype = str(ref.dtype)
    if dtype not in TOLERANCES:
        return 0.0 if np.array_equal(out, ref) else float("inf")
    rtol, atol = TOLERANCES[dtype]
    o, r = out.astype("float64"), ref.astype("float64")
    if not np.array_equal(np.isnan(o), np.isnan(r)):
        return float("inf")
    finite = ~np.isnan(r)
    if not finite.any():
        return 0.0
    o, r = o[finite], r[finite]
    scale = max(float(np.abs(r[np.isfinite(r)]).max(initial=0.0)), np.finfo(np.float64).tiny)
    tol = rtol * np.abs(r) + atol * scale
    with np.errstate(invalid="ignore"):
        err = np.where(o == r, 0.0, np.abs(o - r))  # equal infinities are a match
    return float(np.nan_to_num((err / tol).max(), nan=float("inf")))


def _decisions(plain: list) -> list:
    return sorted([i, d] for i, d in plain[1])


def build_script(key: str, mod_json: str, target_config: dict, plain: list, job: dict, artifact: str,
                 *, progress) -> dict:
    """Apply, validate and build one trace into the shared library `artifact` (in a build
    worker, which never runs what it builds). Returns {"stage", "reason", "repairs"}: stage "run"
    with no reason when the library is ready to be checked."""
    import tvm_ffi
    from tvm.driver import build
    from tvm.target import Target

    def stop(stage, reason, **extra):
        return {"stage": stage, "reason": reason, **extra}

    mod = worker_module(key, mod_json)
    target = Target(target_config)
    design = design_part(plain)

    progress("apply")
    try:
        sch = apply(design, mod)
    except Exception as e:
        return stop("apply", _one_line(e))
    repairs = ["decisions"] if _decisions(to_plain(sch.trace)) != _decisions(design) else []
    full = None
    if len(design[0]) < len(plain[0]):  # the script as written, post-processing part included, must apply
        try:
            full = apply(plain, worker_module(key, mod_json))  # not `mod`: applying `design` may have changed it
        except Exception as e:
            return stop("apply", f"post-processing part: {_one_line(e)}")

    progress("validate")
    sch.enter_postproc()
    for p in _postprocs(target_config):
        try:
            accepted = p.apply(sch)
        except Exception as e:
            return stop("validate", f"{type(p).__name__}: {_one_line(e)}", repairs=repairs)
        if not accepted:
            return stop("validate", f"post-processor {type(p).__name__} rejected the schedule", repairs=repairs)
    # What gets built is what MetaSchedule would build: the design part post-processed by the
    # target's own post-processors. A written post-processing part that differs is a repair.
    if full is not None and not tvm_ffi.structural_equal(full.mod, sch.mod):
        repairs.append("post-processing")
    # Defence in depth behind the allowlist: scheduling moves and reshapes work; it never adds a
    # call out of the kernel or a pragma that TVM's code generators would act on.
    escapes = allowlist.escapes(sch.mod) - _unscheduled_escapes(key, mod_json)
    if escapes:
        return stop("validate", f"the scheduled kernel has {sorted(escapes)[0]}, which the unscheduled one "
                    "does not", repairs=repairs)

    progress("build")
    # The module that is checked is the module that is timed: no weight-layout rewrite is
    # removed (MetaSchedule's convention for constant weights; here every argument is an input).
    try:
        built = build(sch.mod, target=target)
    except Exception as e:
        return stop("build", _one_line(e), repairs=repairs)
    if target.kind.name == "cuda":
        return _cuda_source_only(built, target, job, repairs)
    try:
        built.export_library(artifact)
    except Exception as e:
        return stop("build", _one_line(e), repairs=repairs)
    return stop("run", None, repairs=repairs)


def check_kernel(key: str, mod_json: str, target_config: dict, artifact: str, job: dict, *, progress) -> dict:
    """Run the library on `job["checks"]` fresh input sets and compare every buffer with the
    unscheduled kernel (in a sandboxed kernel worker). Stage "time" when it is correct."""
    import tvm
    from tvm.target import Target

    progress("run")
    reference = _reference_outputs(key, worker_module(key, mod_json), Target(target_config), job["checks"],
                                   job["seed"])
    try:
        func = tvm.runtime.load_module(artifact)["main"]
    except Exception as e:
        return {"stage": "run", "reason": f"load: {_one_line(e)}"}
    worst = 0.0
    for s, (inputs, expected) in enumerate(reference):
        try:
            outputs = _run(func, inputs)
        except Exception as e:
            return {"stage": "run", "reason": _one_line(e)}
        progress("check")
        for j, (o, r) in enumerate(zip(outputs, expected)):
            ratio = _compare(o, r)
            worst = max(worst, ratio)
            if ratio > 1.0:
                return {"stage": "check", "reason": f"argument {j} differs from the unscheduled kernel on input "
                        f"set {s} (worst error {ratio:.3g}x the tolerance)", "max_error": ratio}
    return {"stage": "time", "reason": None, "max_error": worst}


def _cuda_source_only(built, target, job: dict, repairs: list) -> dict:
    """Without a GPU a cuda build is CUDA source only; optionally compile it with nvcc."""
    cuda = [m for m in built.imports if m.kind == "cuda"]
    source = cuda[0].inspect_source() if cuda else ""
    if job.get("nvcc") and source:
        from tvm.support import nvcc

        try:
            with target:
                nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")
        except Exception as e:
            return {"stage": "build", "reason": f"nvcc: {_one_line(e)}", "repairs": repairs}
    compiled = " and compiled by nvcc" if job.get("nvcc") and source else ""
    return {"stage": "run", "reason": f"no GPU here: built {len(source):,} characters of CUDA source{compiled}; "
            "numerics and latency need a GPU", "repairs": repairs}


def build_reference(key: str, mod_json: str, target_config: dict, artifact: str, *, progress) -> None:
    """Export the unscheduled kernel, whose latency is the default reference, to `artifact`."""
    from tvm.target import Target

    from dragonlab.search.measure import fast_build

    progress("build")
    fast_build(worker_module(key, mod_json), Target(target_config)).export_library(artifact)


def time_kernel(artifact: str, arg_specs: list, number: int, repeat: int, min_repeat_ms: int,
                *, progress) -> list[float]:
    """Seconds per call, one value per repeat, after one warm-up call, on random inputs."""
    import tvm

    progress("time")
    lib = tvm.runtime.load_module(artifact)
    args = [tvm.runtime.tensor(a) for a in _random_args(arg_specs, 0)]
    lib["main"](*args)  # warm-up: page in code and data
    timer = lib.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return [float(x) for x in timer(*args).results]
