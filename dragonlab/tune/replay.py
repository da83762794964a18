"""The worker side of `dragonlab tune`: what runs inside the evaluator's worker processes.

- `write_database` (build worker): each task's chosen trace, its design part post-processed by
  the target's post-processors (what the evaluator built and judged), into a MetaSchedule
  JSONDatabase.
- `build_network` (build worker): the Relax network built with such a database
  (`ms.relax_integration.compile_relax`; tasks not in it keep TVM's default schedules).
- `check_network`, `time_network` (sandboxed kernel worker, timing process): the built network
  on stored input sets against the stored expected outputs; its latency end to end.

The data file (`.npz`, written by the parent) holds `input<s>_<i>` (input set s), `param<j>`
and `expected<s>_<k>` (output k of the reference on input set s).
"""

from __future__ import annotations

import os


def write_database(entries: list, target_config: dict, out: str, *, progress) -> int:
    """`entries`: [(task module JSON, plain trace, latencies)]; writes `out` (a new directory)."""
    import tvm.s_tir.meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.target import Target

    from dragonlab.core.codec import apply, design_part
    from dragonlab.evaluation.replay import target_postprocs, worker_module

    progress("apply")
    target = Target(target_config)
    db = ms.database.JSONDatabase(work_dir=out)
    for mod_json, plain, latencies in entries:
        mod = worker_module("", mod_json)
        sch = apply(design_part(plain), mod)
        sch.enter_postproc()
        for p in target_postprocs(target_config):
            if not p.apply(sch):
                raise ValueError(f"post-processor {type(p).__name__} rejected a chosen schedule")
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, db.commit_workload(worker_module("", mod_json)), list(latencies), target,
            ArgInfo.from_prim_func(mod["main"])))
    return len(entries)


def build_network(mod_json: str, database: str | None, target_config: dict, artifact: str, *, progress) -> str:
    """Build the network with `database` (None: no tuned task) into the library `artifact`,
    which appears whole or not at all."""
    import tvm.s_tir.meta_schedule as ms
    from tvm.target import Target
    from tvm_ffi.serialization import from_json_graph_str

    progress("build")
    db = (ms.database.JSONDatabase(work_dir=database, allow_missing=False) if database
          else ms.database.MemoryDatabase())
    executable = ms.relax_integration.compile_relax(db, from_json_graph_str(mod_json), Target(target_config), None)
    partial = f"{artifact}.partial.so"
    executable.export_library(partial)
    os.replace(partial, artifact)
    return artifact


def _machine(artifact: str, target_config: dict):
    import tvm
    from tvm import relax

    device = tvm.cpu() if target_config["kind"] == "llvm" else tvm.device(target_config["kind"])
    return relax.VirtualMachine(tvm.runtime.load_module(artifact), device), device


def flat_outputs(value) -> list:
    """A network's result (a TVM or torch tensor, or nested tuples of them) as a flat list of
    numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for item in value for a in flat_outputs(item)]


def _tensors(data, prefix: str, device) -> list:
    import tvm

    names = sorted((k for k in data.files if k.startswith(prefix)), key=lambda k: int(k[len(prefix):]))
    return [tvm.runtime.tensor(data[k], device) for k in names]


def check_network(artifact: str, data: str, target_config: dict, checks: int, *, progress) -> dict:
    """Run the network on each stored input set and compare every output with the expected one
    within the evaluator's per-dtype tolerances. Stage "time" when it matches."""
    import numpy as np

    from dragonlab.evaluation.replay import check_runs

    progress("run")
    vm, device = _machine(artifact, target_config)
    arrays = np.load(data)
    params = _tensors(arrays, "param", device)
    reference = [(f"input{s}_", [arrays[f"expected{s}_{k}"] for k in range(
        sum(f.startswith(f"expected{s}_") for f in arrays.files))]) for s in range(checks)]
    return check_runs(lambda inputs: flat_outputs(vm["main"](*_tensors(arrays, inputs, device), *params)), reference,
                      what="output", against="the reference", progress=progress)


def time_network(artifact: str, data: str, target_config: dict, number: int, repeat: int, min_repeat_ms: int,
                 *, progress) -> list[float]:
    """Seconds per network run, one value per repeat, after one warm-up run, on input set 0."""
    import numpy as np

    progress("time")
    vm, device = _machine(artifact, target_config)
    arrays = np.load(data)
    args = [*_tensors(arrays, "input0_", device), *_tensors(arrays, "param", device)]
    vm["main"](*args)
    timer = vm.time_evaluator("main", device, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return [float(x) for x in timer(*args).results]
