"""Named compilation targets.

TVM 0.27 takes targets as JSON dicts only (strings are refused), so every target in dragonlab
has a short name (`cpu`, `cuda-sm80`, ...) that maps to one such dict. The name is what records,
datasets and reports carry; the dict is rebuilt from it, so a record never depends on how a
target string happened to be spelled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

from dragonlab.core.errors import InputError

# Per-architecture limits that MetaSchedule's VerifyGPUCode and thread-binding rules read.
# Values from NVIDIA's CUDA programming guide (compute capabilities table).
_CUDA_ARCHS = {
    "sm80": dict(arch="sm_80", max_shared_memory_per_block=49152, max_threads_per_block=1024, registers_per_block=65536),
    "sm86": dict(arch="sm_86", max_shared_memory_per_block=49152, max_threads_per_block=1024, registers_per_block=65536),
    "sm89": dict(arch="sm_89", max_shared_memory_per_block=49152, max_threads_per_block=1024, registers_per_block=65536),
    "sm90": dict(arch="sm_90", max_shared_memory_per_block=49152, max_threads_per_block=1024, registers_per_block=65536),
}


class UnknownTargetError(InputError):
    pass


@dataclass(frozen=True)
class TargetSpec:
    """A named target: `name` is what dragonlab stores, `config` is what TVM receives."""

    name: str
    config: dict

    @property
    def kind(self) -> str:
        return self.config["kind"]

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def kernel_env(self) -> dict[str, str]:
        """The environment of a process that runs this target's kernels: TVM's runtime sizes its
        thread pool from TVM_NUM_THREADS (else OMP_NUM_THREADS, whatever its parent had), and a
        kernel runs on the cores the target declares, or on TVM_NUM_THREADS where that is set (the
        test suite sets 1: two test processes share the cores). Empty for a target without cores."""
        cores = os.environ.get("TVM_NUM_THREADS") or self.config.get("num-cores")  # set for TVM: a choice
        return {"TVM_NUM_THREADS": str(cores)} if cores else {}

    @property
    def device_type(self) -> str:
        """The device string MetaSchedule's runners expect ("cpu" or "cuda", never "llvm")."""
        return "cuda" if self.is_gpu else "cpu"

    def tvm(self):
        """The `tvm.target.Target`, built lazily so that importing dragonlab stays cheap."""
        return _tvm_target(json.dumps(self.config, sort_keys=True))


@lru_cache(maxsize=None)
def _tvm_target(config_json: str):
    from tvm.target import Target

    return Target(json.loads(config_json))


def _host_cores() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:  # pragma: no cover - psutil is a pinned dependency
        return os.cpu_count() or 1


def target_names() -> list[str]:
    return ["cpu"] + [f"cuda-{arch}" for arch in _CUDA_ARCHS]


def get_target(name: str) -> TargetSpec:
    """Resolve a target name; `cpu` is the host (llvm) with its physical cores detected."""
    if name == "cpu":
        return TargetSpec("cpu", {"kind": "llvm", "num-cores": _host_cores()})
    if name.startswith("cuda-") and name[5:] in _CUDA_ARCHS:
        limits = _CUDA_ARCHS[name[5:]]
        config = {"kind": "cuda", "thread_warp_size": 32, "max_num_threads": 1024, **limits,
                  "host": {"kind": "llvm"}}
        return TargetSpec(name, config)
    raise UnknownTargetError(f"unknown target {name!r}; known targets: {', '.join(target_names())}")


def name_of(target) -> str:
    """The dragonlab name for a `tvm.target.Target` found in someone else's database.

    llvm targets are `cpu`; cuda targets are `cuda-smXY` by their arch. Anything else keeps
    its TVM spelling, so imported records are never silently re-labelled.
    """
    kind = target.kind.name
    if kind == "llvm":
        return "cpu"
    if kind == "cuda":
        arch = str(target.attrs.get("arch", "")).replace("_", "")
        if arch and arch in _CUDA_ARCHS:
            return f"cuda-{arch}"
        return f"cuda-{arch}" if arch else "cuda"
    return str(target)
