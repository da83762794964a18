"""dragonlab: teach a small language model to write TVM MetaSchedule schedules, and check it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dragonlab")
except PackageNotFoundError:  # run from a source tree that was not installed
    __version__ = "unknown"
