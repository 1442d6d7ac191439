"""Headless Debian Chromium driven by Playwright: what a user does in JupyterLab and Notebook 7.

For the browser tests and benchmarks. What is real: Debian's ``/usr/bin/chromium``
(Playwright's Python wheel carries only the driver; ``playwright install`` is never run), pages
served by a real ``jupyter_server`` (:class:`harness.server.JupyterServer`), and the kernel
websocket the page opens itself, which :class:`harness.page_websocket.WebsocketLog` reads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .page_websocket import WebsocketLog
from .polling import WaitTimeout, wait_until
from .server import JupyterServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

#: nbclient (which runs a Voila dashboard's cells) gives a cell's IOPub output 4 s after its
#: reply, then renders without the rest. A 1000-widget cell's outputs can trail its reply by
#: more on a loaded machine, stock or ours alike: the tests' Voilas wait as long as their own
#: hang guards instead, so what they render does not depend on the machine's load.
VOILA_IOPUB_WAIT = "--VoilaExecutor.iopub_timeout=120"

#: JupyterLab without the "new version?" call to PyPI, and with ``window.jupyterapp`` so a test
#: can run commands (``docmanager:save``) as a user's menu click would. Notebook 7 has the same
#: switch on its own app class. Voila's extension (in the same server) waits as
#: :data:`VOILA_IOPUB_WAIT` says.
LAB_ARGS = (
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.expose_app_in_browser=True",
    "--JupyterNotebookApp.expose_app_in_browser=True",
    VOILA_IOPUB_WAIT,
)


def chromium_path() -> str | None:
    return CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")


# JupyterLab's status bar says "<kernel display name> | <Status>"; the notebook toolbar's
# execution indicator (JupyterLab and Notebook 7) carries the kernel status in data-status.
LAB_STATUS_JS = """() => {
    const bar = document.querySelector('.jp-StatusBar-Widget');
    const line = bar && bar.innerText.split('\\n').find(l => l.includes(' | '));
    return line ? line.split('|').pop().trim() : '';
}"""
INDICATOR_STATUS_JS = """() => {
    const el = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return el ? (el.getAttribute('data-status') || '') : '';
}"""


def missing_requirement(modules: Iterable[str] = ("playwright", "jupyterlab")) -> str | None:
    """Why the browser tests cannot run here, or None."""
    if chromium_path() is None:
        return f"{CHROMIUM} not found (apt-get install chromium; see .ci/install-browser.sh)"
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return f"python package {module!r} missing (pip install 'ipykernel-ext[browser]')"
    return None


def require_browser(modules: Iterable[str] = ("playwright", "jupyterlab")) -> None:
    """Skip, saying why, when Chromium or a package is missing.

    Never a failure: CI gets them from ``.ci/install-browser.sh``, which fails if it cannot.
    """
    import pytest

    reason = missing_requirement(modules)
    if reason is not None:
        pytest.skip(reason)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def quiet_lab_settings(lab: JupyterServer) -> None:
    """No "get notified about Jupyter news?" toast over the page (Lab and Notebook 7)."""
    folder = lab.lab_settings_dir / "@jupyterlab" / "apputils-extension"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))


def write_notebook(path: Path, sources: Iterable[str], kernel_name: str = "python3-ext") -> None:
    """A notebook of code cells (no outputs) whose kernelspec is ``kernel_name``."""
    display = {"python3-ext": "Python 3 (ipykernel_ext)", "python3": "Python 3 (ipykernel)"}
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {
                "name": kernel_name,
                "display_name": display.get(kernel_name, kernel_name),
                "language": "python",
            },
            "language_info": {"name": "python"},
        },
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source,
            }
            for i, source in enumerate(sources)
        ],
    }
    path.write_text(json.dumps(notebook, indent=1))


WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def saved_widget_views(path: Path) -> int:
    """How many widget-view outputs the notebook file on disk holds (0 if unreadable)."""
    try:
        notebook = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    return sum(
        WIDGET_VIEW_MIME in output.get("data", {})
        for cell in notebook.get("cells", [])
        for output in cell.get("outputs", [])
    )


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    interval: float = 0.2,
    what: str = "condition",
    page: Any = None,
) -> Any:
    """Poll ``condition`` every ``interval`` s until it is truthy; return its value.

    :func:`harness.polling.wait_until`, whose :class:`~harness.polling.WaitTimeout` (an
    ``AssertionError`` and a ``TimeoutError``) names ``what`` if it is still falsy after
    ``timeout`` s. Pass the ``page`` whenever a Playwright page is open: Playwright's sync API
    delivers events (websocket frames, console lines) only while the caller is inside one of
    its calls, so the wait is spent in ``page.wait_for_timeout`` and :class:`WebsocketLog`
    gets each frame when it arrives, not at the next Playwright call.
    """
    if page is None:
        return wait_until(condition, timeout, what, interval)
    return wait_until(
        condition, timeout, what, interval, sleep=lambda s: page.wait_for_timeout(s * 1000)
    )


def kernelspec_with_args(folder: Path, name: str, base: str, extra_args: Iterable[str]) -> Path:
    """Write kernelspec ``name``: ``base``'s, with ``extra_args`` appended to its argv.

    Returns the folder to put on ``JUPYTER_PATH`` (the spec is ``<folder>/kernels/<name>``).
    """
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(base)
    target = folder / "kernels" / name
    target.mkdir(parents=True, exist_ok=True)
    extra = list(extra_args)
    spec_dict = spec.to_dict()
    spec_dict["argv"] = [*spec.argv, *extra]
    spec_dict["display_name"] = f"{spec.display_name} {' '.join(extra)}".strip()
    (target / "kernel.json").write_text(json.dumps(spec_dict, indent=1))
    return folder


# --- what a user does in JupyterLab and Notebook 7 -------------------------------------


def notebook_url(lab: JupyterServer, frontend: str, name: str, path: Path) -> tuple[str, str]:
    """The URL that opens notebook ``path`` in ``frontend`` (``lab``: in a workspace of its own
    named ``name``; else Notebook 7), and the JS that reads that page's kernel status."""
    if frontend == "lab":
        # A fresh workspace: a reused one would bring back another run's layout.
        return f"lab/workspaces/{name}/tree/{path.name}?token={lab.token}", LAB_STATUS_JS
    return f"notebooks/{path.name}?token={lab.token}", INDICATOR_STATUS_JS


def open_connected(
    page: Any, lab: JupyterServer, log: WebsocketLog, url: str, status_js: str
) -> None:
    """Open ``url``; return once the page's kernel is connected and idle."""
    page.goto(lab.http_url(url))
    # Notebook 7's indicator says "idle" before any kernel is there; the page is connected
    # once its kernel_info_request has been answered over its websocket.
    try:
        wait_for(
            lambda: any(f.msg_type == "kernel_info_reply" for f in log.frames()),
            180,
            what="the page's kernel connected",
            page=page,
        )
    except WaitTimeout as exc:
        # Once (a quiet run, beside the upstream suite's kernels) the page showed its kernel
        # "Unknown" for 180 s: the server's side of it is what the next reader needs.
        what = f"{exc.what} (server log:\n{lab.log_tail(60)}\n)"
        raise WaitTimeout(what, exc.timeout, exc.last) from exc
    page.wait_for_function(f"() => ({status_js})().toLowerCase() === 'idle'", timeout=180_000)


def open_and_run_all(
    page: Any, lab: JupyterServer, log: WebsocketLog, url: str, status_js: str
) -> None:
    """Open ``url``; once the page's kernel is connected and idle, run all cells (without
    waiting for them to finish)."""
    open_connected(page, lab, log, url, status_js)
    wait_command_enabled(page, "notebook:run-all-cells")
    # commands.execute returns a promise that resolves when every cell has finished:
    # do not hand it back to Playwright, which would wait for it.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def wait_command_enabled(page: Any, command: str) -> None:
    """Wait until the page's ``command`` is enabled. JupyterLab's notebook commands act on
    the notebook tracker's current widget, which a loaded page may set after its kernel is
    idle; a command executed before that does nothing, and says nothing."""
    page.wait_for_function(
        "(command) => window.jupyterapp.commands.isEnabled(command)", arg=command, timeout=60_000
    )


def save_notebook(page: Any, path: Path, views: int = 1) -> None:
    """Save as a user would (File > Save); wait until the file on disk holds the widget views.

    A reload reopens the notebook from disk: unsaved outputs would not come back at all.
    """
    page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:save'); }")
    wait_for(
        lambda: saved_widget_views(path) >= views,
        60,
        what=f"{path.name} saved with views",
        page=page,
    )


@dataclass
class Restore:
    """What a page showed after a reload, in seconds from just before ``page.reload()``."""

    reload_at: float
    views_at: float | None = None  # every expected widget view rendered
    busy_at: float | None = None  # the page's kernel status said busy
    statuses: list[tuple[float, str]] = field(default_factory=list)  # every change seen


def watch_restore(
    page: Any,
    log: WebsocketLog,
    selector: str,
    expected: int,
    status_js: str | None,
    bound: float,
) -> Restore:
    """Reload ``page``; poll its DOM every 0.2 s until ``expected`` views of ``selector``
    render and (unless ``status_js`` is None) its status says busy, or ``bound`` s pass."""
    from playwright.sync_api import Error as PlaywrightError

    restore = Restore(reload_at=time.perf_counter())
    page.reload(wait_until="commit")
    while time.perf_counter() - restore.reload_at < bound:
        now = time.perf_counter() - restore.reload_at
        try:
            status = "" if status_js is None else page.evaluate(status_js).lower()
            views = page.locator(selector).count()
        except PlaywrightError:  # the new document is still replacing the old one
            page.wait_for_timeout(200)
            continue
        if not restore.statuses or restore.statuses[-1][1] != status:
            restore.statuses.append((round(now, 2), status))
        if restore.busy_at is None and status == "busy":
            restore.busy_at = now
        if restore.views_at is None and views == expected:
            restore.views_at = now
        if restore.views_at is not None and (status_js is None or restore.busy_at is not None):
            break
        page.wait_for_timeout(200)
    return restore


def shut_down_everything(lab: JupyterServer) -> None:
    """Delete every session and kernel: a frontend that finds kernels already running asks
    which one to use instead of starting its own."""
    for session in lab.api("GET", "api/sessions"):
        lab.api("DELETE", f"api/sessions/{session['id']}")
    for kernel in lab.api("GET", "api/kernels"):
        lab.shutdown_kernel(kernel["id"])
