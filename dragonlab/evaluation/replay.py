"""The evaluator's worker side: what runs inside the build, kernel and timing processes.

`dragonlab.evaluation.evaluate` (the parent) submits these functions to its workers
(`dragonlab.evaluation.workers`), which receive them by reference and import them by module
path, `dragonlab.evaluation.replay.<name>`: this module, and not the evaluator's, so a worker
never imports the parent side (its runners, records and progress bars).

- `prepare_worker`: a build worker's one-off setup (the target's post-processors).
- `build_script`: apply, validate and build one script into a shared library (build worker;
  it never runs what it builds).
- `check_kernel`: run the library on fresh inputs and compare it with the unscheduled kernel
  within `TOLERANCES` (sandboxed kernel worker).
- `build_reference`, `time_kernel`: the unscheduled kernel's library; a library's latency
  (build worker; the sandboxed timing process).

Both sides use `module_json` / `worker_module` (how a workload's module travels to a worker and
is loaded there, afresh for every use), `arg_specs_of` (a module's arguments as plain data) and
`reason_of` (a failure as a verdict's one-line reason). Caches live per worker process.
"""

from __future__ import annotations

from collections import OrderedDict

from dragonlab.core import allowlist
from dragonlab.core.codec import apply, design_part, to_plain
from dragonlab.core.errors import one_line


# Per-dtype tolerance: |out - ref| <= rtol * |ref| + atol * max |ref|. Scaling atol by the
# output's magnitude matters: plain relative error is useless near zero (a correct conv2d
# reached 0.15), and fp32 reductions reorder sums (6.7e-4 absolute on sums of magnitude ~500).
# No floor of 1 on the scale: with one, a softmax (outputs ~0.016) computed in fp16 passed the
# fp32 check; without it the worst of 52 random correct samples used 0.3% of the tolerance.
TOLERANCES = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2),
              "bfloat16": (5e-2, 5e-2)}


def reason_of(e: BaseException) -> str:
    """A failure as an Evaluation's reason: the last line of the message (TVM's errors put it
    after the IR they diagnose; a worker's RemoteError text names its own type)."""
    return one_line(e, last=True, typed=False)


def module_json(mod) -> str:
    """The form a workload's module travels to a worker in (`worker_module` loads it there)."""
    import tvm

    return tvm.ir.save_json(mod)


def arg_specs_of(mod) -> list:
    """[(shape, dtype), ...] of a module's main function: picklable, for the worker processes."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return [([int(d) for d in a.shape], str(a.dtype)) for a in ArgInfo.from_prim_func(mod["main"])]


# Per worker process: post-processors by target, the last few references' outputs, and what each
# unscheduled workload already reaches outside itself.
_POSTPROCS: dict[str, list] = {}
_REFERENCES: OrderedDict = OrderedDict()
_ESCAPES: dict[str, set[str]] = {}


def worker_module(key: str, mod_json: str):
    """A fresh copy of the workload's module for every use (2 ms). TVM 0.27 schedules can change
    the module they were made from: after `get root; ann b0 tiling "SSRSRS"; children b0 >2;
    loops b1 >4; fuse l4..5` on the quick depthwise conv2d, a new Schedule of the same module
    object finds 3 loops where there were 4. A cached module made verdicts depend on what the
    worker had evaluated before. The JSON comes from this TVM, so `tvm.ir.load_json`'s version
    upgrade is skipped (0.15 ms instead of 1.1 ms; the schedule oracle loads one per replayed line)."""
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(mod_json)


def target_postprocs(target_config: dict) -> list:
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
    target_postprocs(target_config)


def random_args(arg_specs: list, seed: int) -> list:
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
            inputs = random_args(arg_specs_of(mod), seed * 1000 + s)
            sets.append((inputs, _run(func, inputs)))
        _REFERENCES[cache_key] = sets
        while len(_REFERENCES) > 8:
            _REFERENCES.popitem(last=False)
    return _REFERENCES[cache_key]


def error_ratio(out, ref) -> float:
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


def worst_error(outputs: list, expected: list) -> tuple[float, int | None]:
    """The worst `error_ratio` over paired arrays, and the index of the first one beyond its
    tolerance (None: all match)."""
    ratios = [error_ratio(o, r) for o, r in zip(outputs, expected)]
    return max(ratios, default=0.0), next((k for k, ratio in enumerate(ratios) if ratio > 1.0), None)


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
        return stop("apply", reason_of(e))
    repairs = ["decisions"] if _decisions(to_plain(sch.trace)) != _decisions(design) else []
    full = None
    if len(design[0]) < len(plain[0]):  # the script as written, post-processing part included, must apply
        try:
            full = apply(plain, worker_module(key, mod_json))  # not `mod`: applying `design` may have changed it
        except Exception as e:
            return stop("apply", f"post-processing part: {reason_of(e)}")

    progress("validate")
    sch.enter_postproc()
    for p in target_postprocs(target_config):
        try:
            accepted = p.apply(sch)
        except Exception as e:
            return stop("validate", f"{type(p).__name__}: {reason_of(e)}", repairs=repairs)
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
        return stop("build", reason_of(e), repairs=repairs)
    if target.kind.name == "cuda":
        return _cuda_source_only(built, target, job, repairs)
    try:
        built.export_library(artifact)
    except Exception as e:
        return stop("build", reason_of(e), repairs=repairs)
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
        return {"stage": "run", "reason": f"load: {reason_of(e)}"}
    return check_runs(lambda inputs: _run(func, inputs), reference, what="argument",
                      against="the unscheduled kernel", progress=progress)


def check_runs(run, reference: list, *, what: str, against: str, progress) -> dict:
    """`run(inputs)` on each (inputs, expected outputs) set of `reference`, compared within the
    tolerances: stage "time" with the worst error when every output matches, "check" naming the
    first `what` (an argument, an output) that differs from `against`, "run" when a run raises."""
    worst = 0.0
    for s, (inputs, expected) in enumerate(reference):
        try:
            outputs = run(inputs)
        except Exception as e:
            return {"stage": "run", "reason": reason_of(e)}
        progress("check")
        if len(outputs) != len(expected):
            return {"stage": "check", "reason": f"{len(outputs)} {what}s, {against} has {len(expected)}"}
        ratio, bad = worst_error(outputs, expected)
        worst = max(worst, ratio)
        if bad is not None:
            return {"stage": "check", "reason": f"{what} {bad} differs from {against} on input set {s} "
                    f"(worst error {ratio:.3g}x the tolerance)", "max_error": ratio}
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
            return {"stage": "build", "reason": f"nvcc: {reason_of(e)}", "repairs": repairs}
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
    args = [tvm.runtime.tensor(a) for a in random_args(arg_specs, 0)]
    lib["main"](*args)  # warm-up: page in code and data
    timer = lib.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return [float(x) for x in timer(*args).results]
