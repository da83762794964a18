"""The `dragonlab` command line (`dragonlab.cli:main`, also `python -m dragonlab.cli`).

One module per command group: `search` (targets, workloads, collect, records), `evaluation`
(evaluate, fuzz, codec), `learn` (dataset, sft, attempts, rl), `reporting` (compare, report),
`pipeline` (demo, campaign); `app` parses and dispatches, `options` turns config dataclasses
into flags, and `campaign` reads campaign files.
"""

from dragonlab.cli.app import main
from dragonlab.cli.options import UsageError

__all__ = ["main", "UsageError"]
