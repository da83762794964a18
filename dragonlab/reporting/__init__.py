"""What the runs showed: the report (metrics, search curves, comparisons), its HTML page, plots and
notebook widgets."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "ReportConfig": "report", "run_report": "report", "read_report": "report",
    "compare": "compare", "Comparison": "compare",
})
