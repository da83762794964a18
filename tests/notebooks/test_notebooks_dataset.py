"""notebooks/03_dataset.ipynb runs top to bottom with small parameters, as papermill runs it in batch."""

from pathlib import Path

import datasets
import nbformat
import papermill

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_dataset.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"




def test_dataset_notebook_collects_builds_saves_and_plots(notebook_kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cells = nbformat.read(NOTEBOOK, 4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# 03")
    assert all(not cell.get("outputs") for cell in cells), "commit notebooks without outputs"
    out = tmp_path / "03_dataset.ipynb"
    # no records at `records` yet: the notebook collects its own tiny set there
    parameters = {"records": "records", "trials": 4, "population": 64, "out": "ds", "seed": 0,
                  "holdout_family": "softmax"}  # population: the demo's (campaigns/quick.toml)
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters=parameters, kernel_name=notebook_kernel,
                               cwd=str(tmp_path), progress_bar=False)
    cells = nbformat.read(out, 4).cells
    assert "parameters" in cells[1].metadata.tags and "injected-parameters" in cells[2].metadata.tags
    outputs = [o for cell in cells for o in cell.get("outputs", [])]
    assert len([o for o in outputs if PLOTLY in o.get("data", {})]) == 3  # speedups, lengths, families
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "collecting 3 quick workloads x 4 trials" in text and "--- compact:" in text
    assert "=== construction:" in text and "saved to ds:" in text
    dsd = datasets.load_from_disk(str(tmp_path / "ds"))
    assert set(dsd) >= {"test_family"} and set(dsd["test_family"]["family"]) == {"softmax"}
