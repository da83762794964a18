"""Regenerate docs/comparison.png: `python docs/make_screenshot.py` runs notebooks/00_quickstart.ipynb
in JupyterLab in headless Chromium (Debian's `chromium` and the playwright package, as tests/reporting/test_browser.py
does) and keeps the comparison cell's output.

`python docs/make_screenshot.py --report runs/demo/report/report.html --out docs/report-page.png` takes
the report page of a run instead, once every figure is drawn (as tests/reporting/test_report.py checks)."""

import argparse
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent

from dragonlab.testing import browser as lab_browser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DOCS / "comparison.png")
    parser.add_argument("--page", action="store_true", help="the whole JupyterLab page, not only the widget")
    parser.add_argument("--report", type=Path, help="a report.html to render instead of the quickstart")
    args = parser.parse_args()
    if args.report:
        figures = args.report.read_text().count("Plotly.newPlot")
        rendered = lab_browser.render_report(args.report, args.out.resolve(), figures=figures)
        print(f"wrote {rendered.screenshot} ({rendered.figures} figures, {rendered.tables} tables)")
        return
    notebook = lab_browser.NOTEBOOKS / "00_quickstart.ipynb"
    with tempfile.TemporaryDirectory(prefix="dragonlab-screenshot-") as work:
        rendered = lab_browser.render_comparison(notebook, Path(work), args.out.resolve(), crop=not args.page,
                                                 workload=lab_browser.parameters(notebook)["workload"])
    print(f"wrote {rendered.screenshot} ({rendered.figure_title})")


if __name__ == "__main__":
    main()
