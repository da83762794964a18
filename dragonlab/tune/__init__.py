"""Whole networks tuned by the model, measured against TVM's defaults and MetaSchedule
(`dragonlab tune`, docs/tune.md)."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "tune": "tuning", "TuneResult": "tuning", "TuneConfig": "config", "Network": "network", "load": "network",
    "from_torch": "network", "from_relax": "network", "summary_text": "page", "write_html": "page",
    "candidates": "page", "network_rows": "page", "task_rows": "page", "latency_figure": "page", "task_figure": "page",
})
