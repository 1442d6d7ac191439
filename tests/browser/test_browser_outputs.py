"""Outputs survive the tab: what a page shows of a cell whose tab went away.

A real ``jupyter lab`` with jupyter-collaboration, ``python3-ext`` with CurveZMQ required,
``SharedChannelsConnection``, Chromium via Playwright; every case on JupyterLab 4.6 and on
Notebook 7. A cell prints ``line 0`` .. ``line 39`` then ``done``; its tab leaves after
``line 5`` (reloaded, closed, its network cut, ...). Then the page shows every line once and
in order, ``[*]`` while the cell runs, its count once it ended, and the same outputs in the
saved ``.ipynb``. Without collaboration the server writes the file once the cell ended with no
tab open (solo). Then servers as installed (no flag: the server extension picks the class),
stock ipykernel too, the off switch (a reload loses the later lines, as on stock), and
Enterprise Gateway. Cells stop at holds (harness/outputs_cells.py) until the test has looked;
every wait is on what the page or file shows; screenshots go to artifacts/.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.browser import (
    ARTIFACTS,
    LAB_ARGS,
    quiet_lab_settings,
    require_browser,
    wait_for,
)
from harness.browser_outputs import (
    STDOUT,
    WIDGET,
    Notebook,
    check_counting_cell_end,
    check_counting_cell_mid,
    file_output_data,
    lines,
    new_notebook,
    outputs,
    running,
    running_all,
    save,
    shows_line,
    shows_prompt,
    summary,
    wait_file,
    wait_page,
)
from harness.gateway import EG_EXT, EG_STOCK, EnterpriseGateway, gateway_command
from harness.outputs_cells import HANG, counting_cell, input_cell, rich_cell, widget_cell
from harness.server import JupyterServer

# Hang guard per test: a collaborative JupyterLab, Chromium, a tab closed and reopened.
pytestmark = [pytest.mark.server, pytest.mark.timeout(400)]

CONNECTION_CLASS = "ipykernel_ext.server.SharedChannelsConnection"
SERVER_ARGS = (
    *LAB_ARGS,
    f"--ServerApp.kernel_websocket_connection_class={CONNECTION_CLASS}",
    # The room saves the file this long after the document changed (default 1 s).
    "--YDocExtension.document_save_delay=0.5",
)
#: Collaboration installed but off (notebooks load through the ContentsManager).
SOLO_ARGS = (*SERVER_ARGS, "--YDocExtension.disable_rtc=True")


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ready() -> None:
    require_browser(("playwright", "jupyterlab", "notebook", "ipywidgets"))
    if importlib.util.find_spec("jupyter_server_ydoc") is None:
        pytest.skip("jupyter-collaboration missing (pip install 'ipykernel-ext[collab]')")


#: As installed: no class named, the package's server extension as configured, or switched off.
INSTALLED_ARGS = (*LAB_ARGS, "--YDocExtension.document_save_delay=0.5")
INSTALLED_SOLO_ARGS = (*INSTALLED_ARGS, "--YDocExtension.disable_rtc=True")
OFF_ARGS = (*INSTALLED_ARGS, "--ServerApp.jpserver_extensions={'ipykernel_ext': False}")


def _server(
    factory: pytest.TempPathFactory,
    args: tuple[str, ...],
    ipykernel_ext: bool | None = False,
    encryption: bool = True,
) -> Iterator[JupyterServer]:
    root = factory.mktemp("root")
    with JupyterServer(
        app="lab",
        root_dir=root,
        extra_args=args,
        ipykernel_ext=ipykernel_ext,
        encryption=encryption,
    ) as server:
        quiet_lab_settings(server)
        yield server


@pytest.fixture(scope="module")
def lab(ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    yield from _server(tmp_path_factory, SERVER_ARGS)


@pytest.fixture(scope="module")
def solo_lab(ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    yield from _server(tmp_path_factory, SOLO_ARGS)


@pytest.fixture(scope="module")
def installed_lab(ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    yield from _server(tmp_path_factory, INSTALLED_ARGS, ipykernel_ext=None)


@pytest.fixture(scope="module")
def installed_solo(
    ready: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterServer]:
    yield from _server(tmp_path_factory, INSTALLED_SOLO_ARGS, ipykernel_ext=None)


@pytest.fixture
def context(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh context of conftest's browser (which starts ``lab``); screenshots of its pages
    go to artifacts/."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield ctx
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        for i, page in enumerate(ctx.pages):
            with contextlib.suppress(Exception):
                page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{i}.png"))
        ctx.close()


# --- the counting cell ---------------------------------------------------------------------


def counting_case(
    context: Any,
    nb: Notebook,
    leave: Callable[[Any], Any],
    come_back: Callable[[Any], Any],
) -> None:
    """Run the counting cell; after line 5 ``leave(page)`` (returns a page or None), let the
    cell go on to line 29; ``come_back(that)`` returns the page to look at; check mid-cell
    and after it ended."""
    nb.write([counting_cell(nb.holds())])
    holds = nb.holds()
    with running_all(context, nb) as page:
        wait_page(page, "line 5 shown", shows_line(0, "line 5"))
        holds.wait_held(1, page)
        left = leave(page)
        holds.release(1)
        holds.wait_held(2, left)
        page = come_back(left)
        mid = check_counting_cell_mid(page)
        holds.release(2)
        check_counting_cell_end(page, nb, nb.count(holds, 0, page))
        assert mid is None, mid


# --- the cases -----------------------------------------------------------------------------


def reload(page: Any) -> Any:
    page.reload(wait_until="commit")  # the old document (and its websockets) is gone
    return page


#: JupyterLab 4.6 and Notebook 7 (a notebook at /notebooks/<path>; the same cell widgets).
FRONTENDS = pytest.mark.parametrize("frontend", ["lab", "notebook7"])


@FRONTENDS
def test_b_close_then_reopen_once_the_cell_went_on(
    lab: JupyterServer, context: Any, frontend: str
) -> None:
    nb = new_notebook(lab, "b", frontend)
    close = lambda page: page.close()  # noqa: E731
    # Reopened once the cell is at line 29 (it got there with no tab open).
    counting_case(context, nb, close, lambda _: nb.open(context))


@FRONTENDS
def test_c_second_tab_stays_while_the_first_closes(
    lab: JupyterServer, context: Any, frontend: str
) -> None:
    nb = new_notebook(lab, "c", frontend)

    def open_second_then_close_first(page: Any) -> Any:
        second = nb.open(context, tab=1)
        wait_page(second, "the second tab shows line 5", shows_line(0, "line 5"))
        page.close()
        return second

    counting_case(context, nb, open_second_then_close_first, lambda second: second)


KERNEL_JS = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"


@FRONTENDS
def test_d_websocket_cut_then_same_session_back(
    lab: JupyterServer, context: Any, frontend: str
) -> None:
    """The page's websocket closed while the browser is offline (its own retries fail); once
    online, ``KernelConnection.reconnect()`` brings the same session (client id) back."""
    nb = new_notebook(lab, "d", frontend)
    seen: dict[str, Any] = {}

    def kernel_connections() -> int:
        kernel = lab.api("GET", "api/sessions")[0]["kernel"]
        return lab.kernel_model(kernel["id"])["connections"]

    def cut(page: Any) -> Any:
        seen["client"] = page.evaluate(f"() => {KERNEL_JS}.clientId")
        context.set_offline(True)
        page.evaluate(f"() => {{ {KERNEL_JS}.reconnect().catch(() => null); }}")
        # The server saw the websocket close (its count of the kernel's connections is 0).
        wait_for(lambda: kernel_connections() == 0, HANG, what="the websocket cut", page=page)
        return page

    def back(page: Any) -> Any:
        context.set_offline(False)
        page.evaluate(f"() => {{ {KERNEL_JS}.reconnect().catch(() => null); }}")
        wait_for(lambda: kernel_connections() == 1, HANG, what="the websocket back", page=page)
        seen["client_after"] = page.evaluate(f"() => {KERNEL_JS}.clientId")
        return page

    counting_case(context, nb, cut, back)
    assert seen["client_after"] == seen["client"], seen


def rich_case(context: Any, nb: Notebook) -> None:
    """display_id updates, a progress line and clear_output."""
    holds = nb.holds()
    nb.write([rich_cell(holds)])

    def rich(step: int) -> list[tuple[str, str]]:
        return [
            (STDOUT, "frame 19"),
            ("text/plain", f"status {step}"),
            (STDOUT, f"progress {step}"),
        ]

    with running_all(context, nb) as page:
        wait_page(page, "frame 5 shown", shows_line(0, "frame 5"))
        holds.wait_held(1, page)
        page = reload(page)
        holds.release(1)
        shown = wait_page(
            page, "progress 29", lambda s: outputs(s[0])[-1:] == [(STDOUT, "progress 29")]
        )
        assert outputs(shown[0]) == rich(29), summary(shown)
        mid = running(shown)
        holds.release(2)
        count = nb.count(holds, 0, page)
        shown = wait_page(page, f"[{count}]", shows_prompt(0, f"[{count}]:"))
        assert outputs(shown[0]) == rich(39), summary(shown)
        save(page)
        saved = [
            ("stream:stdout", "frame 19\n"),
            ("display_data", ("text/plain",)),
            ("stream:stdout", "progress 39\n"),
        ]
        wait_file(nb.path, {"cell-0": {"count": count, "outputs": saved}}, page)
        assert file_output_data(nb.path, "cell-0") == [{"text/plain": "status 39"}]
        assert mid is None, mid


def run_all_case(context: Any, nb: Notebook) -> None:
    """Run all of three cells, reloaded during the first."""
    first, second, third = nb.holds(0), nb.holds(1), nb.holds(2)
    nb.write(
        [
            counting_cell(first),
            counting_cell(second, "second", n=10, at=()),
            counting_cell(third, "third", n=10, at=()),
        ]
    )
    with running_all(context, nb) as page:
        wait_page(page, "line 5 shown", shows_line(0, "line 5"))
        first.wait_held(1, page)
        page = reload(page)
        first.release(1)
        mid = check_counting_cell_mid(page)
        # The running tab shows [*] on the cells queued behind the running one too (the
        # reloaded page draws its cells one after another: wait for all three).
        shown = wait_page(page, "three cells, each [*]", lambda s: running(s, 3) is None)
        assert [outputs(c) for c in shown[1:]] == [[], []], summary(shown)
        first.release(2)
        counts = [nb.count(h, i, page) for i, h in enumerate((first, second, third))]
        prompts = [f"[{n}]:" for n in counts]
        shown = wait_page(page, f"prompts {prompts}", lambda s: [c["prompt"] for c in s] == prompts)
        want = [
            [*lines("line", 40), "done"],
            [*lines("second", 10), "done"],
            [*lines("third", 10), "done"],
        ]
        assert [outputs(c) for c in shown] == [[(STDOUT, "\n".join(w))] for w in want], summary(
            shown
        )
        save(page)
        wait_file(
            nb.path,
            {
                f"cell-{i}": {
                    "count": counts[i],
                    "outputs": [("stream:stdout", "".join(f"{x}\n" for x in w))],
                }
                for i, w in enumerate(want)
            },
            page,
        )
        assert mid is None, mid


def widget_case(context: Any, nb: Notebook) -> None:
    """A widget and HTML drawn after the tab left."""
    holds = nb.holds()
    nb.write([widget_cell(holds)])

    def drawn(value: int) -> Callable[[list[dict[str, Any]]], bool]:
        def check(shown: list[dict[str, Any]]) -> bool:
            outs = shown[0]["outputs"]
            return (
                len(outs) == 2
                # ipywidgets' view carries no data-mime-type: the slider drawn is the proof
                and (outs[0]["sliders"], outs[0]["readout"]) == (1, str(value))
                and (outs[1]["mime"], outs[1]["marks"]) == ("text/html", 1)
            )

        return check

    with running_all(context, nb) as page:
        wait_page(page, "slider drawn", lambda s: [o["sliders"] for o in s[0]["outputs"]] == [1])
        holds.wait_held(1, page)
        page = reload(page)
        holds.release(1)
        holds.wait_held(2, page)
        shown = wait_page(page, "slider at 29 and the HTML drawn", drawn(29))
        mid = running(shown)
        holds.release(2)
        count = nb.count(holds, 0, page)
        shown = wait_page(
            page,
            f"slider at 40, [{count}]",
            lambda s: drawn(40)(s) and shows_prompt(0, f"[{count}]:")(s),
        )
        save(page)
        saved = [
            ("display_data", tuple(sorted(["text/plain", WIDGET]))),
            ("display_data", ("text/html", "text/plain")),
        ]
        wait_file(nb.path, {"cell-0": {"count": count, "outputs": saved}}, page)
        assert mid is None, mid


#: The cases a reload mid-cell leaves whole, by notebook name.
RELOADED: dict[str, Callable[[Any, Notebook], None]] = {
    "a": lambda context, nb: counting_case(context, nb, reload, lambda page: page),
    "e": rich_case,
    "f": run_all_case,
    "g": widget_case,
}


@FRONTENDS
@pytest.mark.parametrize("name", list(RELOADED))
def test_a_reload_mid_cell_keeps_the_cell_whole(
    lab: JupyterServer, context: Any, frontend: str, name: str
) -> None:
    RELOADED[name](context, new_notebook(lab, name, frontend))


@FRONTENDS
def test_h_input_echo_stays_after_a_reload(lab: JupyterServer, context: Any, frontend: str) -> None:
    """The tab answers ``input()`` (its echo ``name? world`` is the tab's, in no kernel
    message), then reloads mid-cell: the echo stays, once, in place."""
    input_case(context, new_notebook(lab, "h", frontend), solo=False)


def test_input_echo_without_collaboration_closed_then_reopened(
    solo_lab: JupyterServer, context: Any
) -> None:
    """Without a live document: the tab closes after the answer; reopened, the echo is there."""
    input_case(context, new_notebook(solo_lab, "hsolo"), solo=True)


def input_case(context: Any, nb: Notebook, solo: bool) -> None:
    holds = nb.holds()
    nb.write([input_cell(holds)])
    hello = [*lines("hello world", 10), "done"]
    with running_all(context, nb) as page:
        answer = page.locator(".jp-Stdin-input")
        answer.wait_for(state="visible")
        answer.fill("world")
        answer.press("Enter")
        holds.wait_held(1, page)
        if solo:
            page.close()
        else:
            reload(page)
        holds.release_all()
        count = nb.count(holds)
        want = [
            ("stream:stdout", "before\n"),
            ("stream:stdin", "name? world\n"),
            ("stream:stdout", "".join(f"{line}\n" for line in hello)),
        ]
        if solo:  # written once the cell ended and no tab is open; then opened again
            wait_file(nb.path, {"cell-0": {"count": count, "outputs": want}})
            page = nb.open(context)
        shown = wait_page(
            page,
            f"done and [{count}]",
            lambda s: shows_prompt(0, f"[{count}]:")(s) and shows_line(0, "done")(s),
        )
        # Three outputs (JupyterLab draws a stdin stream as stdout; the file names it).
        assert outputs(shown[0]) == [
            (STDOUT, "before"),
            (STDOUT, "name? world"),
            (STDOUT, "\n".join(hello)),
        ], summary(shown)
        if not solo:
            save(page)
            wait_file(nb.path, {"cell-0": {"count": count, "outputs": want}}, page)


def test_without_collaboration_reopened_after_the_cell_ended(
    solo_lab: JupyterServer, context: Any
) -> None:
    solo_case(context, new_notebook(solo_lab, "solo"))


def solo_case(context: Any, nb: Notebook) -> None:
    holds = nb.holds()
    nb.write([counting_cell(holds)])
    with running_all(context, nb) as page:
        wait_page(page, "line 5 shown", shows_line(0, "line 5"))
        holds.wait_held(1, page)
        page.close()
        holds.release_all()
        count = nb.count(holds)
        expected = [*lines("line", 40), "done"]
        text = "".join(f"{line}\n" for line in expected)
        wait_file(nb.path, {"cell-0": {"count": count, "outputs": [("stream:stdout", text)]}})
        page = nb.open(context)
        shown = wait_page(page, f"[{count}]", shows_prompt(0, f"[{count}]:"))
        assert outputs(shown[0]) == [(STDOUT, "\n".join(expected))], summary(shown)


# --- as installed: no flag, the server extension picks the class ---------------------------


@pytest.mark.parametrize(
    ("frontend", "kernel"),
    [("lab", "python3-ext"), ("notebook7", "python3")],  # python3: stock ipykernel
)
def test_installed_no_flag_reload_keeps_the_cell_whole(
    installed_lab: JupyterServer, context: Any, frontend: str, kernel: str
) -> None:
    assert "outputs survive the tab: on, written into the live document" in (
        installed_lab.log_text()
    )
    nb = new_notebook(installed_lab, "i", frontend, kernel=kernel)
    counting_case(context, nb, reload, lambda page: page)


def test_installed_no_flag_without_collaboration_reopened_after_the_cell_ended(
    installed_solo: JupyterServer, context: Any
) -> None:
    solo_case(context, new_notebook(installed_solo, "isolo"))


def test_installed_with_the_off_switch_a_reload_loses_the_later_lines(
    ready: None, tmp_path_factory: pytest.TempPathFactory, context: Any
) -> None:
    """As stock: no line the cell printed after hold 1 is shown (read once it ended)."""
    for lab in _server(tmp_path_factory, OFF_ARGS, ipykernel_ext=None):
        assert "ipykernel_ext" not in lab.log_text()
        nb = new_notebook(lab, "off")
        holds = nb.holds()
        nb.write([counting_cell(holds)])
        with running_all(context, nb) as page:
            wait_page(page, "line 5 shown", shows_line(0, "line 5"))
            holds.wait_held(1, page)
            reload(page)
            holds.release_all()
            holds.wait_ended(page)
            save(page)  # the document as the room holds it, into the file
            shown = wait_page(page, "line 5 shown again", shows_line(0, "line 5"))
            text = "\n".join(t for _, t in outputs(shown[0]))
            assert "line 29" not in text and "done" not in text, summary(shown)


# --- through Enterprise Gateway: --gateway-url, no other flag -------------------------------


@pytest.fixture(scope="module")
def gateway(ready: None) -> Iterator[EnterpriseGateway]:
    command = gateway_command()
    if isinstance(command, str):
        pytest.skip(command)
    with EnterpriseGateway() as gw:
        yield gw


def _gateway_server(
    factory: pytest.TempPathFactory, gateway: EnterpriseGateway, args: tuple[str, ...]
) -> Iterator[JupyterServer]:
    # Enterprise Gateway 3.3 launches kernels with jupyter_client 6: no CurveZMQ there.
    yield from _server(
        factory, (*args, f"--gateway-url={gateway.url}"), ipykernel_ext=None, encryption=False
    )


@pytest.fixture(scope="module")
def gateway_lab(
    gateway: EnterpriseGateway, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterServer]:
    yield from _gateway_server(tmp_path_factory, gateway, INSTALLED_ARGS)


@pytest.fixture(scope="module")
def gateway_solo(
    gateway: EnterpriseGateway, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterServer]:
    yield from _gateway_server(tmp_path_factory, gateway, INSTALLED_SOLO_ARGS)


@FRONTENDS
def test_gateway_reload_keeps_the_cell_whole(
    gateway_lab: JupyterServer, context: Any, frontend: str
) -> None:
    """Our kernel only: stock under Enterprise Gateway's launcher logs ``No such comm`` into
    the running cell (the reloaded page's widget control comm); stock's gateway cells are the
    solo test below and tests/server/test_outputs_gateway.py."""
    log = gateway_lab.log_text()
    assert "ipykernel_ext: kernels behind the gateway" in log, log
    assert "outputs survive the tab: on, written into the live document" in log
    nb = new_notebook(gateway_lab, "g", frontend, kernel=EG_EXT)
    counting_case(context, nb, reload, lambda page: page)


@pytest.mark.parametrize("kernel", [EG_EXT, EG_STOCK])
def test_gateway_without_collaboration_reopened_after_the_cell_ended(
    gateway_solo: JupyterServer, context: Any, kernel: str
) -> None:
    solo_case(context, new_notebook(gateway_solo, "gsolo", kernel=kernel))
