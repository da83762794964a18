"""Run a notebook the way a person does: JupyterLab on loopback, opened in Debian's headless Chromium
(driven by Playwright through `executable_path`, never a browser build of Playwright's own), every
cell run, and a screenshot once the comparison widget and its plotly figure are drawn.

Used by tests/reporting/test_browser.py and docs/make_screenshot.py."""

import ast
import contextlib
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

# The comparison's cell is the one whose widget has the Evaluate button; ipywidgets 8 renders a
# Button as <button class="jupyter-widgets jupyter-button widget-button ...">.
COMPARISON_CELL = ".jp-CodeCell:has(button.widget-button:has-text('Evaluate'))"
# The first error output in the notebook's model (JupyterLab draws errors as stderr, so the DOM can't tell).
FIRST_ERROR = """() => {
    for (const cell of window.jupyterapp.shell.currentWidget.content.widgets) {
        if (cell.model.type !== 'code') continue;
        const error = cell.model.outputs.toJSON().find(o => o.output_type === 'error');
        if (error) return error.traceback.join('\\n').replace(/\\x1b\\[[0-9;]*m/g, '');
    }
    return null;
}"""

# Settings JupyterLab would otherwise ask about or fetch over the network (the news toast would sit
# over the screenshot); windowing "none" renders every cell whether or not it is scrolled into view,
# so what is waited for below does not depend on scrolling.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


class BrowserCheckError(RuntimeError):
    """JupyterLab or the browser did not get the notebook to the expected state; the message says
    what was missing and where the server's log and a screenshot of the page are."""


def chromium() -> str | None:
    """Debian's Chromium (package `chromium`), or None."""
    return shutil.which("chromium")


def playwright_missing() -> str | None:
    """Why Playwright's Python package cannot be used, or None."""
    try:
        importlib.import_module("playwright.sync_api")
    except ImportError as e:
        return f"playwright is not installed ({e})"
    return None


@dataclass(frozen=True)
class Lab:
    url: str  # http://127.0.0.1:PORT
    token: str
    root: Path
    log: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}"


@dataclass(frozen=True)
class Rendered:
    """What the browser saw once the comparison was drawn."""
    screenshot: Path
    workload: str  # the workload dropdown's selected label
    figure_title: str  # the plotly figure's title, as drawn
    boxes: int  # latency boxes drawn, one per system that ran
    seconds: float  # from opening the page to the figure being drawn


def parameters(notebook: Path) -> dict:
    """The literal assignments of the notebook's `parameters` cell."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def jupyter_lab(root: Path, *, start_timeout: float = 120.0):
    """`jupyter lab` of this interpreter serving `root` on 127.0.0.1 with a fresh token; its config,
    settings, workspaces and runtime files live in root/.lab, so the user's own never apply.
    On exit the server shuts its kernels down, and every process it started is killed."""
    root = Path(root)
    home = root / ".lab"
    for name, value in LAB_SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), TQDM_DISABLE="1")
    port, token = _free_port(), secrets.token_hex(16)
    lab = Lab(f"http://127.0.0.1:{port}", token, root, home / "lab.log")
    # The kernelspec's argv starts with "python", which jupyter_client replaces by this sys.executable.
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--allow-root",  # CI runs as root
           "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with open(lab.log, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise BrowserCheckError(f"jupyter lab exited with {proc.returncode} before answering; "
                                        f"{lab.log}:\n{tail(lab.log)}")
            try:
                with urllib.request.urlopen(f"{lab.url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise BrowserCheckError(f"jupyter lab did not answer /api/status in {start_timeout:.0f} s; "
                                        f"{lab.log}:\n{tail(lab.log)}")
            time.sleep(0.5)
        yield lab
    finally:
        _stop(proc, lab)


def _stop(proc: subprocess.Popen, lab: Lab) -> None:
    """Kernels run in sessions of their own (jupyter_client starts them so), and their worker
    processes under them: note the whole tree, ask the server to shut down, then kill what is left."""
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if proc.poll() is None:
        try:
            request = urllib.request.Request(f"{lab.url}/api/shutdown?token={lab.token}", method="POST")
            urllib.request.urlopen(request, timeout=5).close()
            proc.wait(timeout=20)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(tree, timeout=10)


def render_comparison(notebook: Path, workdir: Path, screenshot: Path, *, workload: str,
                      parameters: dict | None = None, crop: bool = False, timeout: float = 240.0) -> Rendered:
    """Copy `notebook` into `workdir` (with `parameters` injected after its parameters cell, as
    papermill injects them), serve it, run all its cells in headless Chromium and wait until
    the comparison widget shows `workload` and its plotly figure; then save a screenshot: the page
    (crop=False) or only the comparison cell's output (crop=True). On failure a screenshot of the page
    is saved all the same, and the error names it."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    executable = chromium()
    if executable is None:
        raise BrowserCheckError("no `chromium` on PATH: apt-get install chromium")
    workdir, screenshot = Path(workdir), Path(screenshot)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    if parameters:
        import nbformat
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook

        nbformat.write(parameterize_notebook(load_notebook_node(str(notebook)), parameters), workdir / notebook.name)
    else:
        shutil.copy(notebook, workdir / notebook.name)
    with jupyter_lab(workdir) as lab, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        page = browser.new_page(viewport={"width": 1680, "height": 1000})
        console: list[str] = []
        page.on("pageerror", lambda e: console.append(f"page error: {e}"))
        page.on("console", lambda m: console.append(f"console {m.type}: {m.text}") if m.type == "error" else None)

        def fail(what: str) -> BrowserCheckError:
            with contextlib.suppress(PlaywrightError):
                page.screenshot(path=str(screenshot))
            return BrowserCheckError(
                f"{what}\npage as it was: {screenshot}\nbrowser errors:\n" + "\n".join(console[-10:]) +
                f"\n{lab.log} (tail):\n{tail(lab.log)}")

        try:
            start = time.monotonic()
            page.goto(lab.notebook_url(notebook.name))
            try:  # the notebook is the current widget and its kernel has started
                page.wait_for_function("""() => {
                    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                    const kernel = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
                    return Boolean(w && w.content && w.content.widgets && w.content.widgets.length > 0
                                   && kernel && kernel.status === 'idle');
                }""", timeout=120_000)
            except PlaywrightError as e:
                raise fail(f"the notebook or its kernel did not come up in JupyterLab: {e}") from None
            # Not awaited: the command's promise resolves only when every cell has run.
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            cell = page.locator(COMPARISON_CELL)
            figure = cell.locator(".js-plotly-plot .main-svg")
            deadline = start + timeout
            while not (cell.count() and figure.count()):
                if error := page.evaluate(FIRST_ERROR):
                    raise fail(f"a cell raised:\n{error}")
                if time.monotonic() > deadline:
                    raise fail(f"no comparison widget with a plotly figure after {timeout:.0f} s "
                               f"(widget: {bool(cell.count())}, figure: {bool(figure.count())})")
                page.wait_for_timeout(1000)
            seconds = time.monotonic() - start
            select = cell.locator(".widget-dropdown:has(label:has-text('workload')) select")
            shown = select.evaluate("s => s.selectedIndex < 0 ? '' : s.options[s.selectedIndex].text")
            title = cell.locator(".js-plotly-plot .gtitle").first.text_content() or ""
            boxes = cell.locator(".js-plotly-plot g.trace.boxes").count()
            if shown != workload:
                raise fail(f"the workload dropdown shows {shown!r}, not {workload!r}")

            # Room for the whole output, the file browser folded away, the comparison at the top.
            page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
            output = cell.locator(".jp-Cell-outputWrapper")
            height = output.bounding_box()["height"]
            page.set_viewport_size({"width": 1680, "height": int(min(max(height + 160, 1000), 4000))})
            output.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(1000)  # relayout after the resize
            if crop:
                output.screenshot(path=str(screenshot))
            else:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return Rendered(screenshot, shown, title, boxes, seconds)


@dataclass(frozen=True)
class RenderedPage:
    screenshot: Path
    figures: int  # plotly figures drawn (an SVG each)
    tables: int
    seconds: float


def render_report(html: Path, screenshot: Path, *, figures: int, timeout: float = 60.0) -> RenderedPage:
    """Open a report page (`report.html`, self-contained: plotly.js inlined) from disk in headless
    Chromium, wait until `figures` plotly figures are drawn, and save a full-page screenshot. On
    failure the page is saved all the same and the error names it with the browser's errors."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    if executable is None:
        raise BrowserCheckError("no `chromium` on PATH: apt-get install chromium")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            start = time.monotonic()
            page.goto(Path(html).resolve().as_uri())
            drawn = page.locator(".js-plotly-plot:has(.main-svg)")
            while drawn.count() < figures:
                if errors or time.monotonic() - start > timeout:
                    page.screenshot(path=str(screenshot), full_page=True)
                    raise BrowserCheckError(f"{drawn.count()} of {figures} figures drawn in {html}; page as it was: "
                                            f"{screenshot}\n" + "\n".join(errors[-10:]))
                page.wait_for_timeout(250)
            seconds = time.monotonic() - start
            page.screenshot(path=str(screenshot), full_page=True)
            return RenderedPage(screenshot, drawn.count(), page.locator("table").count(), seconds)
        finally:
            browser.close()
