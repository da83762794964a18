"""The notebooks run top to bottom with small parameters, as papermill runs them in batch."""

from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"




@pytest.mark.parametrize("name, parameters", [
    ("01_traces", {"workload": "matmul_m64_n64_k64_float32", "target": "cpu", "samples": 1, "seed": 1}),
])
def test_notebook_runs_with_small_parameters(notebook_kernel, name, parameters, tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    source = NOTEBOOKS / f"{name}.ipynb"
    assert all(not cell.get("outputs") for cell in nbformat.read(source, 4).cells), "commit notebooks without outputs"
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(source), str(out), parameters=parameters, kernel_name=notebook_kernel,
                               cwd=str(tmp_path), progress_bar=False)
    cells = nbformat.read(out, 4).cells
    assert "parameters" in cells[1].metadata.tags and "injected-parameters" in cells[2].metadata.tags
    text = "".join(o.get("text", "") for cell in cells for o in cell.get("outputs", []))
    assert "exact=True" in text and "script (" in text and "as_python (" in text


def test_quickstart_searches_steps_and_compares(notebook_kernel, tmp_path, monkeypatch):
    """00_quickstart: a small search, the stepper and the comparison widget, rendered as widget views."""
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    source = NOTEBOOKS / "00_quickstart.ipynb"
    assert all(not cell.get("outputs") for cell in nbformat.read(source, 4).cells), "commit notebooks without outputs"
    out = tmp_path / "00.ipynb"
    papermill.execute_notebook(str(source), str(out), parameters={"trials": 4, "samples": 1, "records": "records"},
                               kernel_name=notebook_kernel, cwd=str(tmp_path), progress_bar=False)
    outputs = [o for cell in nbformat.read(out, 4).cells for o in cell.get("outputs", [])]
    views = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(views) == 2  # the stepper and the comparison
    text = "".join(o.get("text", "") for o in outputs)
    assert "get " in text and "T.prim_func" in text  # the kernel, then the best script
    assert (tmp_path / "records" / "workloads.jsonl").is_file()


def test_every_notebook_is_a_lesson_with_parameters_and_no_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names[0].startswith("00_") and names[-1].startswith("06_") and len(names) == 7
    for name in names:
        cells = nbformat.read(NOTEBOOKS / name, 4).cells
        assert cells[0].cell_type == "markdown" and cells[0].source.startswith(f"# {name[:2]} · "), name
        assert "parameters" in cells[1].metadata.get("tags", []), name
        assert not any(c.get("outputs") or c.get("execution_count") for c in cells if c.cell_type == "code"), name
        assert "What to take away" in cells[-1].source, name
