"""Looking at traces: design spaces, random samples of them, and one trace in every form.

The notebooks and `dragonlab codec show` call these; nothing here measures anything.

    spaces = design_spaces(w.mod, "cpu")              # MetaSchedule's design spaces (Schedules)
    samples = sample_traces(w, "cpu", n=3, seed=1)    # random, postprocessed samples of them
    print(side_by_side(samples[0].sch.trace))         # the script beside Trace.as_python()

A sample replays a design space's instructions without their decisions on a fresh
`Schedule(mod, seed=k)`, so every sampling instruction draws anew, then runs the target's
postprocessors. It is deterministic for a given seed; on CUDA most samples
fail VerifyGPUCode and are skipped, which is why sampling tries more seeds than it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from dragonlab.core import codec, tensor_intrinsics
from dragonlab.core.errors import InputError
from dragonlab.core.targets import TargetSpec, get_target
from dragonlab.core.workloads import Workload


def tvm_target(target):
    """A `tvm.target.Target` from a dragonlab target name, a TargetSpec, a config dict or a Target."""
    from tvm.target import Target

    if isinstance(target, str):
        return get_target(target).tvm()
    if isinstance(target, TargetSpec):
        return target.tvm()
    return target if isinstance(target, Target) else Target(target)


def tune_context(mod, target, *, seed: int = 42, search_strategy="replay-trace", task_name: str = "main",
                 num_threads: int | str = 1):
    """A MetaSchedule TuneContext with the target's default rules, postprocessors and mutators
    (made with TVM's tensor intrinsics only where the target can use them:
    `tensor_intrinsics.for_target`)."""
    import tvm.s_tir.meta_schedule as ms

    tvm_t = tvm_target(target)
    with tensor_intrinsics.for_target(tvm_t):
        return ms.TuneContext(mod=mod, target=tvm_t, space_generator="post-order-apply",
                              search_strategy=search_strategy, task_name=task_name, num_threads=num_threads,
                              rand_state=seed)


def design_spaces(mod, target) -> list:
    """MetaSchedule's design spaces for `mod` on `target`: one Schedule each, decisions sampled."""
    return list(tune_context(mod, target).generate_design_space())


def replay(ctx, mod, space, seed: int):
    """A random sample of `space`, postprocessed; None if a postprocessor rejects it."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    sch = Schedule(mod, seed=seed)
    Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    return sch if all(p.apply(sch) for p in ctx.space_generator.postprocs) else None


@dataclass(frozen=True)
class Sample:
    space: int  # which design space it was drawn from
    seed: int  # the Schedule's seed: the same seed draws the same sample
    sch: object  # tvm.s_tir.Schedule: `.trace` (postprocessing included) and `.mod`


def sample_traces(workload: Workload, target="cpu", n: int = 3, seed: int = 1, *,
                  tries: int | None = None) -> list[Sample]:
    """Up to `n` postprocessed random samples, taken from the design spaces in turn.

    Seeds `seed, seed + 1, ...` are tried until `n` samples pass the postprocessors or `tries`
    seeds (default `50 * n`) are spent.
    """
    if n < 0 or seed < 1:  # TVM refuses seed 0
        raise InputError(f"need n >= 0 and seed >= 1, got n={n}, seed={seed}")
    ctx = tune_context(workload.mod, target)
    spaces = list(ctx.generate_design_space())
    samples = []
    for k in range(50 * n if tries is None else tries):
        if len(samples) == n:
            break
        space = k % len(spaces)
        sch = replay(ctx, workload.mod, spaces[space], seed + k)
        if sch is not None:
            samples.append(Sample(space, seed + k, sch))
    return samples


@dataclass(frozen=True)
class Forms:
    """One trace as the model sees it (script), as TVM prints it (Python), and as compact JSON."""

    script: str
    python: tuple[str, ...] | None  # Trace.as_python(), one entry per instruction; None if TVM fails
    json: str

    def sizes(self) -> str:
        n = len(self.script)
        python = f"as_python {len(self.python_text)} ({len(self.python_text) / n:.2f}x), " if self.python else ""
        return f"script {n} chars, {python}json {len(self.json)} ({len(self.json) / n:.2f}x)"

    @property
    def python_text(self) -> str:
        """What the size ratios count: the Python lines joined with newlines."""
        return "\n".join(self.python or ())


def forms(trace) -> Forms:
    """The forms of a `Trace`, postprocessing included (as_python needs the live Trace)."""
    import json

    try:
        python = tuple(trace.as_python(remove_postproc=False))
    except Exception:  # TVM 0.27's as_python fails on DecomposePadding (a type mismatch in C++)
        python = None
    return Forms(codec.encode(trace), python, json.dumps(codec.to_plain(trace), separators=(",", ":")))


def side_by_side(trace, *, width: int = 44) -> str:
    """The script beside `as_python`, one instruction per row, with their sizes in the header.

    A script line longer than `width` gets a row of its own, and its Python goes on the next row.
    """
    f = forms(trace)
    script = f.script.split("\n")
    if f.python is None:
        return f"script ({len(f.script)} chars; TVM's as_python failed on this trace)\n{f.script}"
    python = [p.replace("\n", "\\n") for p in f.python]  # a string attribute may hold a newline
    width = min(width, max(map(len, script)))
    rows = [f"{f'script ({len(f.script)} chars)':{width}} | as_python ({len(f.python_text)} chars)",
            f"{'-' * width}-+-{'-' * min(60, max(map(len, python)))}"]
    for s, p in zip(script, python):
        rows += [s, f"{'':{width}} | {p}"] if len(s) > width else [f"{s:{width}} | {p}"]
    return "\n".join(rows)
