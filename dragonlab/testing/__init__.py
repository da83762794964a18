"""What the tests, the benchmarks and the docs' scripts share: a corpus of real traces, a
loopback RPC cluster, a stub chat server for fault injection, a real `transformers serve` on
loopback, a headless Chromium that renders notebooks and the report, and functions for worker
processes to run. The library itself never imports this package."""
