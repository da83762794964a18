"""notebooks/02_reward.ipynb runs top to bottom with small parameters, as papermill runs it in batch."""

from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_reward.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"




@pytest.mark.slow  # a real 4-trial search and an evaluator (about 25 s)
def test_reward_notebook_runs_with_small_parameters(notebook_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cells = nbformat.read(NOTEBOOK, 4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# 02")
    assert all(not cell.get("outputs") for cell in cells), "commit notebooks without outputs"
    out = tmp_path / "02_reward.ipynb"
    parameters = {"workload": "matmul_m64_n64_k64_float32", "samples": 2, "trials": 4, "seed": 1, "workers": 1}
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters=parameters, kernel_name=notebook_kernel,
                               cwd=str(tmp_path), progress_bar=False)
    cells = nbformat.read(out, 4).cells
    assert "parameters" in cells[1].metadata.tags and "injected-parameters" in cells[2].metadata.tags
    outputs = [o for cell in cells for o in cell.get("outputs", [])]
    figures = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert len(figures) == 3  # stages, reward shape, latencies
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "best of search" in text and "random 1" in text and "truncate" in text
    assert "good" in text and "{'ok': 1}" in text  # the search's best kernel is correct
