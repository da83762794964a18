"""MetaSchedule's side: design spaces, search and measurement, and the records it leaves (the
corpus, its benchmark split and MetaSchedule databases)."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "CollectConfig": "config", "MeasureConfig": "config", "collect": "collect",
    "RecordStore": "records", "Record": "records", "merge": "records",
    "Benchmark": "benchmark", "design_spaces": "explore", "sample_traces": "explore",
})
