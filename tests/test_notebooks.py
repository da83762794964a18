"""The notebooks run top to bottom with small parameters, as papermill runs them in batch."""

import sys
from pathlib import Path

import nbformat
import papermill
import pytest
from jupyter_client.kernelspec import KernelSpecManager

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def kernel() -> str:
    """`python3`, checked to start this interpreter: jupyter_client runs a kernelspec whose argv
    begins with plain "python" on sys.executable, and the venv's own spec comes first."""
    argv = KernelSpecManager().get_kernel_spec("python3").argv
    assert argv[0] in ("python", "python3", sys.executable), \
        f"the python3 kernel runs {argv[0]}, not this venv; register one: python -m ipykernel install --sys-prefix"
    return "python3"


@pytest.mark.parametrize("name, parameters", [
    ("01_traces", {"workload": "matmul_m64_n64_k64_float32", "target": "cpu", "samples": 1, "seed": 1}),
])
def test_notebook_runs_with_small_parameters(name, parameters, tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")  # papermill logs each progress-bar update as a line
    source = NOTEBOOKS / f"{name}.ipynb"
    assert all(not cell.get("outputs") for cell in nbformat.read(source, 4).cells), "commit notebooks without outputs"
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(source), str(out), parameters=parameters, kernel_name=kernel(),
                               cwd=str(tmp_path), progress_bar=False)
    cells = nbformat.read(out, 4).cells
    assert "parameters" in cells[1].metadata.tags and "injected-parameters" in cells[2].metadata.tags
    text = "".join(o.get("text", "") for cell in cells for o in cell.get("outputs", []))
    assert "exact=True" in text and "script (" in text and "as_python (" in text
