"""dragonlab: teach a small language model to write TVM MetaSchedule schedules, and check it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dragonlab")
except PackageNotFoundError:  # run from a source tree that was not installed
    __version__ = "unknown"


def use_repository_root():
    """Work from the repository root when started in its notebooks/ directory, as JupyterLab starts a
    notebook's kernel, so that the notebooks' paths ("data/cpu-standard-v1", "runs/...") mean what
    they mean on the command line. Anywhere else (papermill's working directory, a user's own) it
    changes nothing. Returns the working directory."""
    import os
    from pathlib import Path

    here = Path.cwd()
    if here.name == "notebooks" and (here.parent / "pyproject.toml").is_file() and (here.parent / "dragonlab").is_dir():
        os.chdir(here.parent)
    return Path.cwd()
