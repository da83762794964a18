"""Curated exports for dragonlab's subpackages, imported on first use.

Each subpackage names its public API in one table; `from dragonlab.learn import SFTConfig` then
imports `dragonlab.learn.sft` only when the name is asked for, so importing a light module (SFT,
the records, the codec's text) never drags in TVM or torch through its package.
"""

from __future__ import annotations

import importlib


def lazy(package: str, table: dict[str, str]):
    """`__getattr__`, `__dir__` and `__all__` for `package`, whose names live in
    `table`'s modules (name -> module name inside the package)."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{table[name]}"), name)

    def __dir__():
        return sorted(table)

    return __getattr__, __dir__, sorted(table)
