"""Write environment.yml and binder/ from pyproject.toml, the one source of dependencies.

    python scripts/derive_envs.py          # rewrite the derived files
    python scripts/derive_envs.py --check  # exit 1 if they differ from what pyproject.toml says
    python scripts/derive_envs.py --no-deps  # print the packages to install with pip --no-deps
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = "3.11"
HEADER = "# Derived from pyproject.toml by scripts/derive_envs.py: edit pyproject.toml, then rerun it.\n"
# torch's CPU wheels: without this index, pip takes PyPI's torch, a CUDA build of several GB.
PIP_OPTIONS = ["--extra-index-url https://download.pytorch.org/whl/cpu"]


# The optional groups `make install` installs (the Makefile's `-e '.[test,serve]'`), in this order.
GROUPS = ("test", "serve")


def pip_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [req for group in GROUPS for req in project["optional-dependencies"][group]]


def no_deps_requirements() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["dragonlab"]["no-deps"]


def environment_yml(*, install_self: bool) -> str:
    lines = [HEADER, f"# Then: pip install --no-deps {' '.join(no_deps_requirements())}\n", "name: dragonlab\n", "channels:\n  - conda-forge\n", "dependencies:\n",
             f"  - python={PYTHON}\n", "  - pip\n", "  - pip:\n"]
    lines += [f"    - {req}\n" for req in PIP_OPTIONS + pip_requirements()]
    if install_self:
        lines.append("    - -e .\n")
    return "".join(lines)


def post_build() -> str:
    return HEADER + f"""set -euo pipefail
# repo2docker installed the pinned dependencies from binder/environment.yml; add dragonlab itself
# and the packages pyproject.toml installs without their dependencies.
python -m pip install --no-deps -e . {' '.join(no_deps_requirements())}
# A Chrome for kaleido's PNG export of plotly figures, unless the image has one (Debian's chromium).
command -v chromium >/dev/null || plotly_get_chrome -y
# JupyterLab opens with ipywidgets and plotly working: both ship prebuilt lab extensions; check them.
jupyter labextension list 2>&1 | grep -q "@jupyter-widgets/jupyterlab-manager.*enabled"
jupyter labextension list 2>&1 | grep -q "jupyterlab-plotly.*enabled"
"""


def derived() -> dict[Path, str]:
    return {
        ROOT / "environment.yml": environment_yml(install_self=True),
        ROOT / "binder" / "environment.yml": environment_yml(install_self=False),
        ROOT / "binder" / "postBuild": "#!/usr/bin/env bash\n" + post_build(),
    }


def main() -> int:
    if "--no-deps" in sys.argv[1:]:
        print(" ".join(no_deps_requirements()))
        return 0
    check = "--check" in sys.argv[1:]
    stale = []
    for path, text in derived().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            if path.name == "postBuild":
                path.chmod(0o755)
    if check and stale:
        print("out of date with pyproject.toml: " + ", ".join(map(str, stale))
              + " (run python scripts/derive_envs.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
