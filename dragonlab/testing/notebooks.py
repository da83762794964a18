"""Running the lesson notebooks as papermill runs them in batch, and reading what they showed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


@dataclass(frozen=True)
class Ran:
    """An executed notebook: its cells, every output, and their text (stream and text/plain)."""

    cells: list
    outputs: list[dict]
    text: str

    def count(self, mime: str) -> int:
        return sum(mime in o.get("data", {}) for o in self.outputs)


def run_notebook(name: str, parameters: dict, kernel: str, cwd: Path, *, cell_timeout: int = 1200) -> Ran:
    """Run notebooks/`name`.ipynb in `cwd` with `parameters`, after checking that it is a lesson
    committed without outputs: a title cell, then the cell tagged `parameters`. A cell still
    running after `cell_timeout` seconds fails the run (once, on a loaded machine, a kernel's
    reply to a finished cell never reached papermill, which waited for it forever)."""
    import nbformat
    import papermill

    source = NOTEBOOKS / f"{name}.ipynb"
    cells = nbformat.read(source, 4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith(f"# {name[:2]} · "), name
    assert "parameters" in cells[1].metadata.get("tags", []), name
    assert not any(c.get("outputs") or c.get("execution_count") for c in cells if c.cell_type == "code"), \
        f"{name}: commit notebooks without outputs"
    out = Path(cwd) / f"{name}.ipynb"
    papermill.execute_notebook(str(source), str(out), parameters=parameters, kernel_name=kernel, cwd=str(cwd),
                               progress_bar=False, execution_timeout=cell_timeout)
    cells = nbformat.read(out, 4).cells
    assert "injected-parameters" in cells[2].metadata.get("tags", []), name
    outputs = [o for cell in cells for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    return Ran(cells, outputs, text)
