"""notebooks/04_sft.ipynb and 05_rl.ipynb run top to bottom with small parameters, as papermill
runs them in batch: a scratch-tiny SFT run, GRPO from the tiny model, and the comparison."""

from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"


def run_notebook(name: str, parameters: dict, kernel: str, cwd: Path) -> tuple[list, str]:
    cells = nbformat.read(NOTEBOOKS / name, 4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith(f"# {name[:2]}")
    assert "parameters" in cells[1].metadata.get("tags", [])
    assert all(not cell.get("outputs") for cell in cells), "commit notebooks without outputs"
    out = cwd / name
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters, kernel_name=kernel,
                               cwd=str(cwd), progress_bar=False)
    outputs = [o for cell in nbformat.read(out, 4).cells for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    return outputs, text


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_sft_notebook_trains_samples_and_judges(quiet, data, notebook_kernel, tmp_path):
    parameters = {"data": str(data), "run": "sft", "preset": "scratch-tiny", "max_steps": 20, "split": "train",
                  "n": 1, "limit": 2, "temperature": 0.8}
    outputs, text = run_notebook("04_sft.ipynb", parameters, notebook_kernel, tmp_path)
    assert len([o for o in outputs if PLOTLY in o.get("data", {})]) == 2  # loss curve, stages
    assert "training scratch-tiny into sft" in text and "generated" in text and "reference" in text
    assert "attempts  correct   exact" in text
    assert (tmp_path / "sft" / "model" / "config.json").is_file()
    assert len((tmp_path / "sft" / "attempts-train.jsonl").read_text().splitlines()) == 2


def test_rl_notebook_trains_and_compares_with_sft(quiet, tiny, data, notebook_kernel, tmp_path):
    parameters = {"data": str(data), "sft_run": str(tiny[0].out), "run": "rl", "max_steps": 2, "num_generations": 2,
                  "prompts_per_step": 1, "beta": 0.0, "splits": ["train"], "limit": 2}
    outputs, text = run_notebook("05_rl.ipynb", parameters, notebook_kernel, tmp_path)
    assert len([o for o in outputs if PLOTLY in o.get("data", {})]) >= 2  # reward curves, stages
    assert "GRPO from" in text and "RL vs SFT where both are correct" in text
    assert (tmp_path / "rl" / "model" / "config.json").is_file()
