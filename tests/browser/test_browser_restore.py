"""Reloading a page while a cell runs: widgets and status come back mid-cell.

JupyterLab and Notebook 7 reopen the notebook and ask the kernel for ``kernel_info`` (shell)
and every widget's state (ipywidgets' ``jupyter.widget.control`` comm). Stock answers none of
it until the cell ends ("Loading widget...", status "Unknown"); ``python3-ext`` answers on
its shell-channel thread. One real ``jupyter lab`` (with Notebook 7 and Voila's extension),
CurveZMQ required, Chromium via Playwright, no frontend change.

The long cell runs until the test makes its stop file, after checking the page: "restored
while the cell runs" is decided by order; bounds are hang guards (times:
``python -m benchmarks browser_restore``). The page's websocket is decoded from outside
(:class:`harness.page_websocket.WebsocketLog`). The race test holds the kernel's off-thread
read of the states until the cell changed a widget read before it, so the page always gets
that change too early.

Debugging (not CI): ``IPYKERNEL_EXT_RESTORE_KERNEL=python3`` (stock) or
``IPYKERNEL_EXT_RESTORE_KERNEL_ARGS=--no-answer-while-busy`` make the mid-cell tests fail, as
they should; ``artifacts/browser-restore-*.txt`` keeps what the page sent after the reload.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.browser import (
    ARTIFACTS,
    LAB_ARGS,
    LAB_STATUS_JS,
    kernelspec_with_args,
    notebook_url,
    open_and_run_all,
    quiet_lab_settings,
    require_browser,
    save_notebook,
    wait_for,
    watch_restore,
    write_notebook,
)
from harness.kernel_websocket import KernelWebsocket
from harness.page_websocket import Frame, WebsocketLog, format_requests, tracked_statuses
from harness.server import JupyterServer
from ipykernel_ext.kernel.busy.busy_routing import INFO_REQUESTS

# Hang guard per test (default 120 s): a JupyterLab server, Chromium and a widget restore.
pytestmark = [pytest.mark.server, pytest.mark.timeout(400)]

BASE_KERNEL = os.environ.get("IPYKERNEL_EXT_RESTORE_KERNEL", "python3-ext")
KERNEL_ARGS = shlex.split(os.environ.get("IPYKERNEL_EXT_RESTORE_KERNEL_ARGS", ""))
KERNEL = f"{BASE_KERNEL}-restore-args" if KERNEL_ARGS else BASE_KERNEL

#: The long cell's safety net: the test always ends it by its stop file, after its checks.
CELL_SECONDS = 900
#: A hang guard on the restore (about 2 s here), not a speed bar: a kernel that does not
#: answer mid-cell never restores before the stop file, however fast the machine.
RESTORE_BOUND = 120
N_SLIDERS = 200
N_BUTTONS = 1000

SLIDERS_CELL = f"""\
import ipywidgets as widgets
sliders = [widgets.IntSlider(value=i, max=1000) for i in range({N_SLIDERS})]
widgets.VBox(sliders)"""


def running_marker(stop: Path) -> Path:  # made by a long cell when it starts
    return stop.with_suffix(".running")


def done_marker(stop: Path) -> Path:  # ... and when it ends
    return stop.with_suffix(".done")


def wait_cell(stop: Path) -> str:
    """A cell that runs until ``stop`` exists (at most CELL_SECONDS)."""
    return f"""\
import pathlib, time
pathlib.Path({str(running_marker(stop))!r}).touch()
deadline = time.monotonic() + {CELL_SECONDS}
while not pathlib.Path({str(stop)!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
pathlib.Path({str(done_marker(stop))!r}).touch()"""


# ipywidgets' views (jupyterlab_widgets 3): an IntSlider is a div ".widget-slider"; a model
# the manager cannot find (yet) shows "Loading widget..." or "Error displaying widget"; a
# view that failed to build is ".jupyter-widgets-error-widget".
SLIDER = ".jp-OutputArea .widget-slider"
BUTTON = "button.jupyter-button.widget-button"
ERROR_WIDGET = ".jupyter-widgets-error-widget"
PLACEHOLDER_TEXTS = ("Loading widget...", "Error displaying widget")


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    """One ``jupyter lab`` (Notebook 7 and Voila's extension load with it), curve required."""
    require_browser(("playwright", "jupyterlab", "notebook", "voila"))
    env = {}
    if KERNEL_ARGS:
        specs = tmp_path_factory.mktemp("kernelspecs")
        env["JUPYTER_PATH"] = str(kernelspec_with_args(specs, KERNEL, BASE_KERNEL, KERNEL_ARGS))
    root = tmp_path_factory.mktemp("root")
    with JupyterServer(app="lab", root_dir=root, extra_args=LAB_ARGS, env=env) as server:
        quiet_lab_settings(server)
        yield server


# --- watching the server and the page ----------------------------------------------------


class StatePoller:
    """Polls ``GET /api/kernels/<id>`` every 0.1 s in a thread: the server's execution_state."""

    def __init__(self, lab: JupyterServer, kernel_id: str) -> None:
        self.samples: list[tuple[float, str]] = []
        self._lab, self._kernel_id = lab, kernel_id
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rest-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            state = self._lab.kernel_model(self._kernel_id)["execution_state"]
            self.samples.append((time.perf_counter(), state))
            self._done.wait(0.1)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=30)

    def states_between(self, start: float, end: float) -> list[str]:
        return [state for t, state in self.samples if start <= t <= end]


def save_log(
    name: str, log: WebsocketLog, since: float, extra: dict[str, Any], until: float | None = None
) -> str:
    """Write the first 30 messages the page sent after ``since`` to artifacts/ ("in time":
    answered before ``until``, the end of the running cell); return the text."""
    ARTIFACTS.mkdir(exist_ok=True)
    table = format_requests(log.requests_after(since, limit=30, until=until))
    text = f"{json.dumps(extra, default=str)}\n{table}\n"
    (ARTIFACTS / f"browser-restore-{name}.txt").write_text(text)
    return text


def notebook_kernel(page: Any, lab: JupyterServer, path: Path) -> str:
    """The id of the kernel the frontend started for ``path`` (its session's), CurveZMQ on."""

    def session_kernel() -> dict[str, Any] | None:
        for session in lab.api("GET", "api/sessions"):
            if session["path"] == path.name and session.get("kernel"):
                return session["kernel"]
        return None

    kernel = wait_for(session_kernel, 120, what=f"a kernel session for {path.name}")
    assert kernel["name"] == KERNEL, kernel
    kernel_id = kernel["id"]
    assert lab.connection_info(kernel_id).get("curve_publickey"), "kernel runs without CurveZMQ"
    return kernel_id


def idles_not_followed_by_busy(frames: list[Frame], idles: list[Frame]) -> list[Frame]:
    """The ``idles`` after which the next *tracked* status is not ``busy`` for an
    execute_request (PROTOCOL.md section 5: an idle beside the running cell is followed at
    once by busy for it; untracked statuses, kernel_info's, may come between)."""
    tracked = [*tracked_statuses(frames, "idle"), *tracked_statuses(frames, "busy")]
    tracked.sort(key=frames.index)
    missing = []
    for idle in idles:
        if idle.parent_msg_type == "execute_request":
            missing.append(idle)  # the cell itself ended: not mid-cell
            continue
        after = tracked[tracked.index(idle) + 1 :]
        following = after[0] if after else None
        if (
            following is None
            or following.content.get("execution_state") != "busy"
            or following.parent_msg_type != "execute_request"
        ):
            missing.append(idle)
    return missing


def wait_until_idle(page: Any, lab: JupyterServer, kernel_id: str, status_js: str) -> None:
    """Once the cell has ended: the page's status says Idle, and so does jupyter_server."""
    page.wait_for_function(f"() => ({status_js})().toLowerCase() === 'idle'", timeout=60_000)
    wait_for(
        lambda: lab.kernel_model(kernel_id)["execution_state"] == "idle",
        30,
        what="idle",
        page=page,
    )


def reconnected(page: Any, log: WebsocketLog, reload_at: float) -> None:
    """Wait until the reloaded page has asked for the kernel's info and every message it sent
    since the reload that the kernel answers mid-cell is answered (a reply, or an IOPub
    child): its reconnection traffic is served, whatever the machine's speed. Shell requests
    other than ``INFO_REQUESTS`` (JupyterLab's ``history_request``) wait for the cell, as on
    stock ipykernel."""

    def pending() -> list[Frame]:
        return [
            f
            for f in log.unanswered(reload_at)
            if not (
                f.channel == "shell"
                and f.msg_type.endswith("_request")
                and f.msg_type not in INFO_REQUESTS
            )
        ]

    def served() -> bool:
        asked = any(
            f.direction == "sent" and f.msg_type == "kernel_info_request"
            for f in log.frames(reload_at)
        )
        return asked and not pending()

    try:
        wait_for(served, RESTORE_BOUND, what="the page's reconnection answered", page=page)
    except TimeoutError:
        left = [(f.channel, f.msg_type, f.content) for f in pending()]
        raise AssertionError(f"unanswered since the reload: {left}") from None


def placeholders(page: Any) -> list[str]:
    text = page.locator(".jp-OutputArea").all_inner_texts()
    return [t for t in PLACEHOLDER_TEXTS if any(t in chunk for chunk in text)]


# --- reload mid-cell, in JupyterLab and in Notebook 7 ------------------------------------


def reload_mid_cell(page: Any, lab: JupyterServer, frontend: str) -> None:
    name = f"reload-{frontend}-{uuid.uuid4().hex[:8]}"
    path = lab.root_dir / f"{name}.ipynb"
    stop = lab.root_dir / f"{name}.stop"
    write_notebook(path, [SLIDERS_CELL, wait_cell(stop)], KERNEL)
    url, status_js = notebook_url(lab, frontend, name, path)
    log = WebsocketLog(page)
    open_and_run_all(page, lab, log, url, status_js)
    kernel_id = notebook_kernel(page, lab, path)
    try:
        wait_for(
            lambda: page.locator(SLIDER).count() == N_SLIDERS,
            120,
            what="sliders rendered",
            page=page,
        )
        wait_for(running_marker(stop).exists, 60, what="the long cell started", page=page)
        save_notebook(page, path)

        poller = StatePoller(lab, kernel_id)
        try:
            restore = watch_restore(page, log, SLIDER, N_SLIDERS, status_js, RESTORE_BOUND)
            # Let the page finish reconnecting (create_subshell, debugger queries, ...) while
            # the cell still runs: that traffic must not make the kernel look idle either.
            reconnected(page, log, restore.reload_at)
            mid_cell_end = time.perf_counter()
            still_running = not done_marker(stop).exists()
            shown_placeholders = placeholders(page)
            status_mid_cell = page.evaluate(status_js).lower()
            stop.touch()  # end the cell
            wait_until_idle(page, lab, kernel_id, status_js)
            idle_views = page.locator(SLIDER).count()
        finally:
            poller.stop()
    finally:
        stop.touch()

    since = restore.reload_at
    rest_states = poller.states_between(since, mid_cell_end)
    idles = tracked_statuses(log.frames(since), "idle")
    idles_mid_cell = [f for f in idles if f.t <= mid_cell_end]
    unanswered_idles = idles_not_followed_by_busy(log.frames(since), idles_mid_cell)
    summary = {
        "kernel": KERNEL,
        "frontend": frontend,
        "views_at_s": restore.views_at,
        "busy_at_s": restore.busy_at,
        "statuses": restore.statuses,
        "status_at_end_of_mid_cell_window": status_mid_cell,
        "rest_states_mid_cell": sorted(set(rest_states)),
        "rest_idle_samples_mid_cell": sum(state != "busy" for state in rest_states),
        "tracked_idles": [(f.parent_msg_type, round(f.t - since, 2)) for f in idles],
        "tracked_idles_mid_cell_without_busy_after": [
            (f.parent_msg_type, round(f.t - since, 2)) for f in unanswered_idles
        ],
        "iopub_statuses": [
            (round(f.t - since, 2), f.content.get("execution_state"), f.parent_msg_type)
            for f in log.frames(since)
            if f.channel == "iopub" and f.msg_type == "status"
        ],
    }
    detail = save_log(frontend, log, since, summary, until=mid_cell_end)
    print(detail)

    assert still_running, "the cell ended before the restore was checked"
    assert restore.views_at is not None, (
        f"the {N_SLIDERS} sliders did not render within {RESTORE_BOUND} s of the reload while "
        f"the cell ran: {detail}"
    )
    assert not shown_placeholders, f"placeholders still shown: {shown_placeholders}; {detail}"
    assert page.locator(ERROR_WIDGET).count() == 0, detail
    assert restore.busy_at is not None, f"status never said busy after the reload: {detail}"
    assert status_mid_cell == "busy", f"status says {status_mid_cell!r} mid-cell: {detail}"
    # PROTOCOL.md section 5: a tracked control idle is followed at once by busy for the cell;
    # a poll can land between the two (one idle sample, busy at the next, is that blip); two
    # in a row, or idle at the end of the window, is a kernel that looks idle.
    assert rest_states and rest_states[-1] == "busy", (
        f"the server's execution_state was not busy at the end of the cell's window: {detail}"
    )
    lasting_idles = [
        i for i, state in enumerate(rest_states[:-1]) if state != "busy" != rest_states[i + 1]
    ]
    assert not lasting_idles, (
        f"the server's execution_state left busy for more than one poll while the cell ran: "
        f"{detail}"
    )
    assert not unanswered_idles, (
        f"a tracked status: idle mid-cell was not followed by busy for the cell: {detail}"
    )
    assert idle_views == N_SLIDERS, f"{idle_views} sliders once idle; {detail}"


@pytest.mark.parametrize("frontend", ["lab", "notebook7"])
def test_reload_mid_cell_restores_widgets_and_busy(
    lab: JupyterServer, page: Any, frontend: str
) -> None:
    reload_mid_cell(page, lab, frontend)


# --- the race: widgets that change while the kernel reads their states ----------------------

RACE_WIDGETS_CELL = """\
import threading
import ipywidgets as widgets
from traitlets import Unicode

snapshot_started = threading.Event()
label_changed = threading.Event()

def gated_to_json(value, widget):
    # Called off the main thread only when the kernel reads states for a frontend while the
    # cell runs. Hold that read until the cell has changed `label`, whose state was read
    # before this one (it was created first): the frontend then gets the change before it
    # knows the model, the exact window in which an update can be lost.
    if threading.current_thread() is not threading.main_thread():
        if not snapshot_started.is_set():
            snapshot_started.set()
            label_changed.wait(10)
    return value

class GatedLabel(widgets.Label):
    value = Unicode("gate").tag(sync=True, to_json=gated_to_json)

label = widgets.Label("before")
label.add_class("restore-label")
progress = widgets.IntProgress(value=0, max=1000)
progress.add_class("restore-progress")
gate = GatedLabel("gate")
gate.add_class("restore-gate")
widgets.VBox([progress, label, gate])"""


def race_loop_cell(stop: Path) -> str:
    """Update ``progress`` every 5 ms; set ``label`` once, while the kernel reads states."""
    return f"""\
import pathlib, time
pathlib.Path({str(running_marker(stop))!r}).touch()
deadline = time.monotonic() + {CELL_SECONDS}
i = 0
while not pathlib.Path({str(stop)!r}).exists() and time.monotonic() < deadline:
    i += 1
    progress.value = i % 1000
    if snapshot_started.is_set() and not label_changed.is_set():
        label.value = "set mid-loop"
        label_changed.set()
    time.sleep(0.005)
pathlib.Path({str(done_marker(stop))!r}).touch()"""


PAGE_VALUES_JS = """() => {
    const bar = document.querySelector('.restore-progress .progress-bar');
    const label = document.querySelector('.restore-label');
    return {
        width: bar ? bar.style.width : null,
        label: label ? label.textContent.trim() : null,
    };
}"""


def kernel_values(lab: JupyterServer, kernel_id: str) -> dict[str, Any]:
    """The widgets' values in the kernel, asked through a second websocket client."""
    with KernelWebsocket(lab, kernel_id) as ws:
        _, iopub = ws.run(
            "import json; print(json.dumps({'progress': progress.value, 'max': progress.max,"
            " 'label': label.value, 'gated': snapshot_started.is_set()}))"
        )
    text = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
    return json.loads(text)


def test_jupyterlab_reload_during_widget_updates_ends_with_kernel_values(
    lab: JupyterServer, page: Any
) -> None:
    name = f"race-{uuid.uuid4().hex[:8]}"
    path = lab.root_dir / f"{name}.ipynb"
    stop = lab.root_dir / f"{name}.stop"
    write_notebook(path, [RACE_WIDGETS_CELL, race_loop_cell(stop)], KERNEL)
    url = f"lab/workspaces/{name}/tree/{path.name}?token={lab.token}"
    log = WebsocketLog(page)
    open_and_run_all(page, lab, log, url, LAB_STATUS_JS)
    kernel_id = notebook_kernel(page, lab, path)
    try:
        wait_for(
            lambda: page.locator(".restore-gate").count() == 1, 120, what="widgets shown", page=page
        )
        wait_for(running_marker(stop).exists, 60, what="the long cell started", page=page)
        save_notebook(page, path)
        restore = watch_restore(page, log, ".restore-gate", 1, LAB_STATUS_JS, RESTORE_BOUND)
        reconnected(page, log, restore.reload_at)
        still_running = not done_marker(stop).exists()
        loop_end = time.perf_counter()
        stop.touch()  # end the loop
        wait_until_idle(page, lab, kernel_id, LAB_STATUS_JS)
        final = kernel_values(lab, kernel_id)
        expected_width = 100.0 * final["progress"] / final["max"]

        def page_matches() -> dict[str, Any] | None:
            shown = page.evaluate(PAGE_VALUES_JS)
            width = shown["width"]
            if (
                shown["label"] == final["label"]
                and width
                and abs(float(width.rstrip("%")) - expected_width) < 1e-6
            ):
                return shown
            return None

        # The last updates may still be on their way: wait for them, not for a fixed time.
        try:
            wait_for(page_matches, 15, what="the page shows the kernel's values", page=page)
            matched = True
        except TimeoutError:
            matched = False
        shown = page.evaluate(PAGE_VALUES_JS)
    finally:
        stop.touch()

    since = restore.reload_at
    received = [f for f in log.frames(since) if f.direction == "received"]
    label_update = next(
        (
            f
            for f in received
            if f.msg_type == "comm_msg"
            and (f.content.get("data") or {}).get("state", {}).get("value") == "set mid-loop"
        ),
        None,
    )
    states_reply = next(
        (
            f
            for f in received
            if f.msg_type == "comm_msg"
            and (f.content.get("data") or {}).get("method") == "update_states"
        ),
        None,
    )
    summary = {
        "kernel": KERNEL,
        "label_update_at_s": None if label_update is None else round(label_update.t - since, 3),
        "update_states_at_s": None if states_reply is None else round(states_reply.t - since, 3),
        "views_at_s": restore.views_at,
        "statuses": restore.statuses,
        "kernel_values": final,
        "page_values": shown,
    }
    detail = save_log("race", log, since, summary, until=loop_end)
    print(detail)
    assert still_running, "the loop ended before the page had restored"
    assert restore.views_at is not None, f"widgets not restored mid-loop: {detail}"
    assert final["gated"], (
        f"the kernel never read the widget states off the main thread: the race was not run: "
        f"{detail}"
    )
    assert final["label"] == "set mid-loop", detail
    assert matched, f"the page does not show the kernel's final values: {detail}"


# --- Voila ---------------------------------------------------------------------------------

GRID_CELL = f"""\
import ipywidgets as widgets
buttons = [widgets.Button(description=str(i), layout=widgets.Layout(width="60px"))
           for i in range({N_BUTTONS})]
widgets.GridBox(buttons, layout=widgets.Layout(grid_template_columns="repeat(20, 64px)"))"""


def not_rendered(exc: TimeoutError, page: Any, log: WebsocketLog, started: float) -> str:
    """What a page that did not render every Button showed, and the first messages it sent
    with when each was answered (ipywidgets gives the control comm's ``request_states`` 4 s,
    then asks every widget with ``request_state`` instead)."""
    shown = page.locator(BUTTON).count()
    text = page.inner_text("body")
    placeholders = {t: text.count(t) for t in PLACEHOLDER_TEXTS if t in text}
    extra = {"kernel": KERNEL, "buttons_rendered": shown, "placeholders": placeholders}
    return f"{exc}: {shown} of {N_BUTTONS} rendered\n{save_log('voila', log, started, extra)}"


def test_voila_dashboard_of_1000_buttons_renders_whole(lab: JupyterServer, page: Any) -> None:
    """Voila runs the notebook, then its page loads every widget's state through the control
    comm: all 1000 Buttons render, CurveZMQ on. (No reload mid-cell: every Voila page load
    starts a kernel of its own, so no Voila page reconnects to a busy kernel.)"""
    name = f"voila-{uuid.uuid4().hex[:8]}"
    path = lab.root_dir / f"{name}.ipynb"
    write_notebook(path, [GRID_CELL], KERNEL)
    log = WebsocketLog(page)
    started = time.perf_counter()
    page.goto(lab.http_url(f"voila/render/{path.name}?token={lab.token}"), wait_until="commit")
    # A hang guard (about 6 s on a quiet machine); the failure says what the page showed.
    try:
        wait_for(
            lambda: page.locator(BUTTON).count() == N_BUTTONS, 300, what="1000 Buttons", page=page
        )
    except TimeoutError as exc:
        raise AssertionError(not_rendered(exc, page, log, started)) from None
    rendered_at = time.perf_counter() - started
    text = page.inner_text("body")
    kernels = lab.api("GET", "api/kernels")
    detail = save_log("voila", log, started, {"kernel": KERNEL, "rendered_at_s": rendered_at})
    print(detail)
    assert [k["name"] for k in kernels] == [KERNEL], kernels
    assert lab.connection_info(kernels[0]["id"]).get("curve_publickey"), "no CurveZMQ"
    assert log.sockets, "the Voila page opened no kernel websocket"
    assert page.locator(ERROR_WIDGET).count() == 0, detail
    assert not [t for t in PLACEHOLDER_TEXTS if t in text], detail
