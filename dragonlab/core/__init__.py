"""The pipeline's vocabulary: workloads and targets, the script codec and its allowlist, and the
files every stage writes (JSON lines, run directories).

Nothing here runs a kernel. The codec and allowlist import TVM; `jsonl`, `rundir` and `progress` do not.
"""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "Workload": "workloads", "suite": "workloads", "iter_suite": "workloads", "lookup": "workloads",
    "TargetSpec": "targets", "get_target": "targets",
    "encode": "codec", "decode": "codec", "apply": "codec", "design_part": "codec", "check_prefix": "codec",
    "CodecError": "codec", "ScriptSyntaxError": "codec", "TraceFormatError": "codec",
    "append_lines": "jsonl", "read_lines": "jsonl", "write_atomic": "jsonl",
})
