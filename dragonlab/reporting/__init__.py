"""What the runs showed: the report (metrics, search curves, comparisons), its HTML page, plots and
notebook widgets."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "ReportConfig": "config", "run_report": "report", "read_report": "report", "Report": "results",
    "search_curves": "metrics", "compare": "compare", "Comparison": "compare", "compare_models": "compare",
    "ModelComparison": "compare",
})
