"""Every lesson notebook runs top to bottom with small parameters, as papermill runs it in batch,
and shows what its lesson is about (06, the report, is tested with the report:
tests/reporting/test_report.py)."""

import ast
from dataclasses import dataclass
from typing import Callable

import datasets
import nbformat
import papermill
import pytest

from conftest import TUNE_NETWORK
from dragonlab.testing.notebooks import NOTEBOOKS, PLOTLY, WIDGET, run_notebook

ROOT = NOTEBOOKS.parent


@dataclass(frozen=True)
class Lesson:
    name: str
    parameters: Callable[[Callable], dict]  # fixture lookup -> papermill parameters
    texts: tuple[str, ...]  # shown somewhere in the outputs
    figures: int = 0  # plotly figures, at least
    widgets: int = 0
    files: tuple[str, ...] = ()  # written under the notebook's working directory


LESSONS = [
    Lesson("00_quickstart", lambda fx: {"trials": 4, "samples": 1, "records": "records"},
           ("get ", "T.prim_func"), widgets=2, files=("records/workloads.jsonl",)),  # the kernel, the best script
    Lesson("01_traces", lambda fx: {"workload": "matmul_m64_n64_k64_float32", "target": "cpu", "samples": 1,
                                    "seed": 1},
           ("exact=True", "script (", "as_python (")),
    Lesson("02_reward", lambda fx: {"workload": "matmul_m64_n64_k64_float32", "samples": 2, "trials": 4, "seed": 1,
                                    "workers": 1},
           ("best of search", "random 1", "truncate", "good", "{'ok': 1}"), figures=3),  # stages, reward, latency
    # no records at `records` yet: the notebook collects its own tiny set there (population: the demo's)
    Lesson("03_dataset", lambda fx: {"records": "records", "trials": 4, "population": 64, "out": "ds", "seed": 0,
                                     "holdout_family": "softmax"},
           ("collecting 3 quick workloads x 4 trials", "--- compact:", "=== construction:", "saved to ds:"),
           figures=3, files=("ds/dataset_dict.json",)),  # speedups, lengths, families
    Lesson("04_sft", lambda fx: {"data": str(fx("data")), "model": None, "run": "sft", "preset": "scratch-tiny",
                                 "max_steps": 20, "split": "train", "n": 1, "limit": 2, "temperature": 0.8,
                                 "constrained": False,
                                 "scaling_points": str(ROOT / "results/cpu-standard/scaling/points.json")},
           ("training scratch-tiny into sft", "generated", "reference", "attempts  correct   exact",
            "| sft | scratch-tiny (", "| small-w30 | scratch-small (3.4M) | 30 |"), figures=3,
           files=("sft/model/config.json", "sft/attempts-train.jsonl")),  # loss curve, stages, scaling
    Lesson("05_rl", lambda fx: {"data": str(fx("data")), "sft_run": str(fx("tiny")[0].out), "run": "rl",
                                "max_steps": 2, "num_generations": 2, "prompts_per_step": 1, "beta": 0.04,
                                "constrained": True, "splits": ["train"], "limit": 2},
           ("GRPO from", "RL vs SFT where both are correct"), figures=4,  # curves, KL, legal mass, comparison
           files=("rl/model/config.json", "rl/rollouts.jsonl")),
    # resumes the session's `dragonlab tune` run (tests/tune): the same network, model and settings
    Lesson("07_tune_network", lambda fx: {"network": str(ROOT / TUNE_NETWORK), "dragon": str(fx("tiny")[0].model_dir),
                                          "out": str(fx("tuned")), "attempts": 1, "budget": 8, "population": 64,
                                          "checks": 2, "searches_from": None},
           ("residual_mlp: 4 tuning tasks", "def main(", "dragon at least as fast as tune_relax@4"),
           figures=2, widgets=1),  # per-task speedups, network latency; the comparison
]


@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.name for lesson in LESSONS])
def test_notebook_runs_with_small_parameters(lesson, request, notebook_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ran = run_notebook(lesson.name, lesson.parameters(request.getfixturevalue), notebook_kernel, tmp_path)
    for text in lesson.texts:
        assert text in ran.text, f"{lesson.name} did not show {text!r}"
    assert ran.count(PLOTLY) >= lesson.figures and ran.count(WIDGET) >= lesson.widgets
    for name in lesson.files:
        assert (tmp_path / name).exists(), f"{lesson.name} did not write {name}"
    if lesson.name == "03_dataset":
        dsd = datasets.load_from_disk(str(tmp_path / "ds"))
        assert set(dsd["test_family"]["family"]) == {"softmax"}
    if lesson.name == "04_sft":
        assert len((tmp_path / "sft" / "attempts-train.jsonl").read_text().splitlines()) == 2


def test_every_notebook_is_a_lesson_with_parameters_and_no_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names[0].startswith("00_") and names[-1].startswith("07_") and len(names) == 8
    assert sorted([f"{lesson.name}.ipynb" for lesson in LESSONS] + ["06_evaluate.ipynb"]) == names
    for name in names:
        cells = nbformat.read(NOTEBOOKS / name, 4).cells
        assert cells[0].cell_type == "markdown" and cells[0].source.startswith(f"# {name[:2]} · "), name
        assert "parameters" in cells[1].metadata.get("tags", []), name
        # `papermill --help-notebook` lists every parameter (its parser skips a line with a second "=")
        assigned = [t.id for node in ast.parse(cells[1].source).body if isinstance(node, ast.Assign)
                    for t in node.targets]
        assert list(papermill.inspect_notebook(str(NOTEBOOKS / name))) == assigned, name
        assert not any(c.get("outputs") or c.get("execution_count") for c in cells if c.cell_type == "code"), name
        assert "What to take away" in cells[-1].source, name


def test_a_notebook_started_in_notebooks_works_from_the_repository_root(tmp_path, monkeypatch):
    """JupyterLab starts a notebook's kernel in notebooks/; the notebooks' paths are the repository's."""
    import dragonlab

    repo = tmp_path / "repo"
    for d in ("notebooks", "dragonlab"):
        (repo / d).mkdir(parents=True)
    (repo / "pyproject.toml").write_text("")
    monkeypatch.chdir(repo / "notebooks")
    assert dragonlab.use_repository_root() == repo
    stranger = tmp_path / "mine" / "notebooks"  # a notebooks/ directory that is not this repository's
    stranger.mkdir(parents=True)
    monkeypatch.chdir(stranger)
    assert dragonlab.use_repository_root() == stranger
    assert all("dragonlab.use_repository_root()" in open(ROOT / "notebooks" / f"{n}.ipynb").read()
               for n in ("00_quickstart", "03_dataset", "04_sft", "05_rl", "06_evaluate", "07_tune_network"))
