"""dlight's default schedules as a baseline, as scripts.

What TVM builds for a kernel nobody tuned: its relax pipelines schedule every PrimFunc with
`dlight.ApplyDefaultSchedule`, trying rules in a fixed order until one applies. On cuda that is
relax/backend/cuda/pipeline.py's order (gpu_generic and rocm use the same one); Fallback applies
to every kernel, so every cuda workload has a default. No CPU pipeline in TVM 0.27 uses dlight:
on llvm an unscheduled kernel is what builds, and `dlight.cpu`'s two rules (GEMV, then
Reduction) are the only defaults there; most CPU workloads have none.

The rules return a Schedule whose trace replays on a fresh Schedule of the workload, so a
default is a script like any other: `default_script` is what a model's script competes with.
"""

from __future__ import annotations

from dragonlab.core.codec import encode
from dragonlab.core.targets import TargetSpec, get_target
from dragonlab.core.workload import load_module
from dragonlab.core.workloads import Workload

# Rule names in the order TVM tries them (module attributes of tvm.s_tir.dlight.cpu / .gpu).
# Not in the cuda pipeline, so not defaults: gpu LowBatchGEMV, RMSNorm, Transpose.
CPU_RULES = ("GEMV", "Reduction")
GPU_RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")


def rules(target: str | TargetSpec) -> list:
    """The target's dlight rules, fresh instances, in the order TVM's default pipeline tries them."""
    from tvm.s_tir import dlight

    spec = get_target(target) if isinstance(target, str) else target
    package, names = (dlight.gpu, GPU_RULES) if spec.is_gpu else (dlight.cpu, CPU_RULES)
    return [getattr(package, name)() for name in names]


def default_rule(workload: Workload, target: str | TargetSpec) -> str | None:
    """The name of the first rule that schedules the workload (e.g. "Matmul"), or None."""
    found = _first_schedule(workload, target)
    return found[0] if found else None


def default_schedule(workload: Workload, target: str | TargetSpec):
    """dlight's default `tvm.s_tir.Schedule` of the workload, or None when no rule applies (the
    default is then the unscheduled kernel). The workload's module is left unchanged."""
    found = _first_schedule(workload, target)
    return found[1] if found else None


def default_script(workload: Workload, target: str | TargetSpec) -> str | None:
    """The default schedule's trace as a script, or None when no rule applies.

    It has no EnterPostproc: dlight emits no post-processing part, so an evaluator that
    post-processes what it builds (dragonlab's does) adds the target's post-processors on top.
    """
    sch = default_schedule(workload, target)
    return None if sch is None else encode(sch.trace)


def _first_schedule(workload: Workload, target: str | TargetSpec):
    """(rule name, Schedule) of the first rule that applies, or None."""
    import tvm
    from tvm.s_tir import Schedule

    spec = get_target(target) if isinstance(target, str) else target
    tvm_target = spec.tvm()
    for rule in rules(spec):
        # A fresh copy for every rule, as a guard: TVM 0.27 schedules can change the module they
        # were made from (see replay.worker_module), and rules start scheduling before they
        # decide (GEMV inlines, then may give up). On the quick suite the rules left the
        # original intact; ApplyDefaultSchedule itself does not. The copy has no "target"
        # attribute (ApplyDefaultSchedule would read one), so the result stays structurally
        # equal to the trace replayed on the workload's own module.
        func = load_module(tvm.ir.save_json(workload.mod))["main"]
        # Inside the target's context, as in the relax pipeline; the cpu and cuda rules read
        # only the target they are given, so this is a precaution, not a requirement.
        with tvm_target:
            sch = rule.apply(func, tvm_target, False)
        if isinstance(sch, list):  # tunable=False promises one Schedule; take it if wrapped
            sch = sch[0] if sch else None
        if isinstance(sch, Schedule):
            return type(rule).__name__, sch
    return None
