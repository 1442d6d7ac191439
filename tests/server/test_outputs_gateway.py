"""Outputs survive the tab through a gateway: a notebook server with ``--gateway-url``, a real
Enterprise Gateway 3.3 (:mod:`harness.gateway`) launching ours (``eg_ext``) and stock
(``eg_stock``) without CurveZMQ (its jupyter_client 6), legacy-JSON websocket clients as
JupyterLab's in gateway mode; the extension as installed makes ``GatewayOutputsConnection``
the class. The cell prints a line per barrier file (:mod:`harness.outputs_notebook`).

Checked: a closed tab's cell reaches the file (ours and stock); with collaboration the
document follows it; the input echo stays; a restart ends an owned cell; the server's own
websocket to the gateway is there while needed and gone after; a failed handshake opens
nothing at the gateway; with the extension off the later lines are lost, as on stock; a
tab's session that comes back (within the grace, or after it) gets what the kernel sent after
its websocket closed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import websocket  # websocket-client

from harness.gateway import EG_EXT, EG_STOCK, EnterpriseGateway, gateway_command
from harness.kernel_websocket import KernelWebsocket
from harness.outputs_notebook import (
    CELL_ID,
    HANG,
    K,
    N,
    Notebook,
    document_follows_the_cell,
    lines,
    stdout_of,
    stream,
    until_line,
)
from harness.polling import wait_until
from harness.server import JupyterServer
from harness.ws_protocol import WS_V1, auth_header, channels_path

pytestmark = pytest.mark.timeout(400)

_COMMAND = gateway_command()
if isinstance(_COMMAND, str):
    pytest.skip(_COMMAND, allow_module_level=True)

OURS = "ipykernel_ext.server.GatewayOutputsConnection"


@pytest.fixture(scope="module")
def gateway() -> Iterator[EnterpriseGateway]:
    with EnterpriseGateway() as gw:
        yield gw


def gateway_server(
    gateway: EnterpriseGateway,
    collab: bool = False,
    extension: bool | None = None,
    grace: float = 0.5,
) -> JupyterServer:
    """A notebook server in gateway mode (to start); ``extension=None``: ours as installed."""
    args = [f"--gateway-url={gateway.url}", f"--KeepOutputs.keep_outputs_grace={grace}"]
    if collab:
        args += [
            '--ServerApp.jpserver_extensions={"outputs_room_extension": True, '
            '"jupyter_server_ydoc": True}',
            "--YDocExtension.document_save_delay=0.5",
        ]
    else:
        args.append('--ServerApp.jpserver_extensions={"jupyter_server_ydoc": False}')
    return JupyterServer(
        ipykernel_ext=extension, encryption=False, extra_args=args, stop_timeout=20
    )


@pytest.fixture(scope="module")
def server(gateway: EnterpriseGateway) -> Iterator[JupyterServer]:
    with gateway_server(gateway) as srv:
        yield srv


def gateway_connections(gateway: EnterpriseGateway, nb: Notebook) -> int:
    """The websockets the gateway counts on the notebook's kernel (its own REST API)."""
    return int(gateway.kernel_model(nb.kernel_id)["connections"])


def test_installed_the_gateway_class_is_ours_and_says_so(server: JupyterServer) -> None:
    wait_until(
        lambda: "ipykernel_ext: kernels behind the gateway" in server.log_text(), HANG, "the log"
    )
    assert f"({OURS}); outputs survive the tab: on, written into the .ipynb" in server.log_text()


@pytest.mark.parametrize("kernel", [EG_EXT, EG_STOCK])
def test_closed_tab_outputs_reach_the_file_once_the_cell_ended(
    server: JupyterServer, kernel: str
) -> None:
    nb = Notebook(server, f"gw-closed-{kernel}.ipynb", kernel)
    ws = KernelWebsocket(server, nb.kernel_id, legacy=True)
    _msg_id, count = nb.leave_mid_cell(ws)
    nb.release(N)
    nb.whole_on_disk(count)


def test_the_feed_closes_once_no_tab_is_open_and_no_cell_runs(
    gateway: EnterpriseGateway, server: JupyterServer
) -> None:
    """The server's own websocket to the gateway must not keep an idle kernel connected (the
    gateway culls only unconnected kernels): open while the cell runs without a tab, gone
    once it ended."""
    nb = Notebook(server, "gw-feed.ipynb", EG_EXT)
    ws = KernelWebsocket(server, nb.kernel_id, legacy=True)
    assert gateway_connections(gateway, nb) == 2  # the tab's and the feed's
    _msg_id, _count = nb.leave_mid_cell(ws)
    wait_until(
        lambda: gateway_connections(gateway, nb) == 1, HANG, "the tab's gone, the feed stays"
    )
    nb.release(N)
    nb.ended_on_disk()
    wait_until(lambda: gateway_connections(gateway, nb) == 0, HANG, "the feed closed")


def test_with_the_extension_off_the_cell_is_lost_as_on_stock(
    gateway: EnterpriseGateway,
) -> None:
    """The premise: jupyter_server's own gateway class loses what came after the tab left."""
    with gateway_server(gateway, extension=False) as srv:
        nb = Notebook(srv, "gw-stock.ipynb", EG_EXT)
        ws = KernelWebsocket(srv, nb.kernel_id, legacy=True)
        msg_id = nb.run(ws)
        nb.release(K + 1)
        until_line(ws, msg_id, K)
        ws.close()
        nb.release(N)
        # A second tab's request runs after the cell (one shell queue): the cell has ended.
        with KernelWebsocket(srv, nb.kernel_id, legacy=True) as later:
            later.collect_execution(later.execute("1"))
        cell = nb.cell_on_disk()
        assert (cell.outputs, cell.execution_count) == ([], None)
        assert "takes over the outputs" not in srv.log_text()


@pytest.mark.parametrize("kernel", [EG_EXT, EG_STOCK])
def test_collab_document_gets_the_lines_as_they_come(
    gateway: EnterpriseGateway, kernel: str
) -> None:
    pytest.importorskip(
        "jupyter_server_ydoc",
        reason="jupyter-collaboration is not installed (pip install 'ipykernel-ext[collab]')",
    )
    with gateway_server(gateway, collab=True) as srv:
        nb = Notebook(srv, f"gw-live-{kernel}.ipynb", kernel)
        nb.open_room()  # a tab opened it
        ws = KernelWebsocket(srv, nb.kernel_id, legacy=True)
        _msg_id, count = nb.leave_mid_cell(ws)
        cell = document_follows_the_cell(srv, nb)
        assert len(cell["outputs"]) == 1 and cell["execution_count"] == count


def test_a_browser_retrying_without_a_subprotocol_opens_one_gateway_websocket(
    gateway: EnterpriseGateway, server: JupyterServer
) -> None:
    """JupyterLab offers the v1 subprotocol; a server in gateway mode selects none, so the
    browser fails that handshake and retries without one, with the same session. The failed
    websocket must open nothing at the gateway: the gateway would find it a stale connection
    of the session when the retry comes, and stall the page's kernel for about a minute."""
    nb = Notebook(server, "gw-retry.ipynb", EG_EXT)
    session = uuid.uuid4().hex
    url = server.ws_url(channels_path(nb.kernel_id, session))
    with pytest.raises(websocket.WebSocketException):  # as the browser: no subprotocol back
        websocket.create_connection(
            url, subprotocols=[WS_V1], header=[": ".join(auth_header(server.token))], timeout=60
        )
    with KernelWebsocket(server, nb.kernel_id, session_id=session, legacy=True) as ws:
        ws.collect_execution(ws.execute("1"))
        assert gateway_connections(gateway, nb) == 2  # this tab's and the feed
    assert f"Replacing stale connection: {nb.kernel_id}:{session}" not in gateway.log_text()


INPUT_CELL = """\
import time
from pathlib import Path
name = input("name?")
print("hello", name, flush=True)
while not Path(r"{go}").exists():
    time.sleep(0.005)
print("after", flush=True)
"""


def test_the_input_echo_stays_when_the_server_takes_the_cell_over(
    server: JupyterServer,
) -> None:
    """The echo JupyterLab writes when the user answers ``input()`` (no kernel message carries
    it) is folded from the input_request and input_reply that pass through the tab's gateway
    websocket, in its place before what the cell printed after."""
    nb = Notebook(server, "gw-input.ipynb", EG_EXT)
    go = nb.barriers / "after"
    ws = KernelWebsocket(server, nb.kernel_id, legacy=True)
    content = {
        "code": INPUT_CELL.format(go=go),
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": True,
        "stop_on_error": True,
    }
    ws.send("shell", "execute_request", content, metadata={"cellId": CELL_ID})
    asked = ws.recv_until(lambda m: m["msg_type"] == "input_request", timeout=120)
    ws.send("stdin", "input_reply", {"value": "world", "status": "ok"}, parent=asked["header"])
    ws.recv_until(
        lambda m: m["msg_type"] == "stream" and "hello world" in m["content"]["text"], timeout=120
    )
    ws.close()
    nb.wait_log("takes over the outputs of cell")
    go.touch()
    cell = nb.ended_on_disk()
    assert [dict(o) for o in cell.outputs] == [
        {"output_type": "stream", "name": "stdin", "text": "name? world\n"},
        stream("hello world\nafter\n"),
    ]


def test_a_restart_through_the_server_ends_an_owned_cell_with_what_it_had(
    server: JupyterServer,
) -> None:
    nb = Notebook(server, "gw-restarted.ipynb", EG_EXT)
    ws = KernelWebsocket(server, nb.kernel_id, legacy=True)
    _msg_id, count = nb.leave_mid_cell(ws, resist=True)
    server.api("POST", f"api/kernels/{nb.kernel_id}/restart", timeout=120)
    cell = nb.ended_on_disk()
    assert [dict(o) for o in cell.outputs] == [stream(lines(K + 1))]
    assert cell.execution_count == count
    assert nb.log_says("running cells end idle (restart)")


BEFORE_AFTER_CELL = """\
import time
from pathlib import Path
print("before", flush=True)
while not Path(r"{go}").exists():
    time.sleep(0.005)
print("after", flush=True)
"""


def test_a_session_that_comes_back_gets_what_the_kernel_sent_after_its_websocket_closed(
    gateway: EnterpriseGateway, server: JupyterServer
) -> None:
    """A network blip: a cell prints ``before`` and waits for a marker; the tab's websocket
    closes; once the gateway buffers for the kernel's last websocket (its log's "Starting
    buffering for K:"), the marker is written and the cell prints ``after`` and ends; the
    kernel is idle (the gateway's model); the same session comes back and runs ``1``
    (after the cell in the shell queue: all of the cell has come by its idle). Between its
    two websockets the session gets every message of the cell once, in order: ``before``,
    ``after``, the cell's idle and its ``execute_reply``. The server keeps the tab's gateway
    websocket open for the grace, so it closes after the feed: the gateway buffers for the
    tab's session, and the tab's websocket on return opens before the feed.

    On f14a6ba the feed closed last, the gateway buffered for the feed's session and dropped
    that buffer when the feed connected again: ``AssertionError: assert '' == 'after\\n'``
    (nothing of the cell after the close: no line, no idle, no reply)."""
    kernel_id = server.start_kernel(EG_EXT)
    go = server.root_dir / f"gw-back-{uuid.uuid4().hex}"
    try:
        tab = KernelWebsocket(server, kernel_id, legacy=True)
        session = tab.session_id
        cell = tab.execute(BEFORE_AFTER_CELL.format(go=go))
        first = [*tab.backlog]
        tab.backlog = []
        first.append(
            tab.recv_until(
                lambda m: m["msg_type"] == "stream" and "before" in m["content"]["text"], HANG
            )
        )
        first += tab.backlog
        tab.close()
        wait_until(
            lambda: f"Starting buffering for {kernel_id}:" in gateway.log_text(),
            HANG,
            "the gateway buffering for the kernel's last websocket",
        )
        go.touch()
        wait_until(
            lambda: gateway.kernel_model(kernel_id)["execution_state"] == "idle",
            HANG,
            "the cell's end",
        )
        with KernelWebsocket(server, kernel_id, session_id=session, legacy=True) as back:
            # The client goes on counting its messages (a new Session counts from 0 again,
            # and its request's msg_id would be the cell's).
            back.session.message_count = tab.session.message_count
            back.collect_execution(back.execute("1"))
            second = [*back.backlog]
    finally:
        server.shutdown_kernel(kernel_id)

    def of(messages: list[dict[str, Any]], msg_type: str) -> list[dict[str, Any]]:
        return [
            m
            for m in messages
            if m["parent_header"].get("msg_id") == cell and m["msg_type"] == msg_type
        ]

    assert "".join(m["content"]["text"] for m in of(first, "stream")) == "before\n"
    later = [m for m in second if m["parent_header"].get("msg_id") == cell]
    assert "".join(m["content"]["text"] for m in of(later, "stream")) == "after\n"
    states = [m["content"]["execution_state"] for m in of(later, "status")]
    assert states == ["idle"]
    assert len(of(later, "execute_reply")) == 1
    assert [m["msg_type"] for m in later if m["channel"] == "iopub"] == ["stream", "status"]


def test_a_session_back_within_the_grace_takes_its_gateway_websocket_over(
    gateway: EnterpriseGateway,
) -> None:
    """A network blip under a followed cell (JupyterLab's ``cellId``), the session back
    within ``keep_outputs_grace`` (60 s here: the return is within it whatever the machine's
    speed). The cell prints up to ``line K``; the tab's websocket closes (the server's log:
    its websocket to the gateway stays open; on f14a6ba: the gateway counts the feed alone);
    the cell prints the rest and ends (the gateway's model idle); the same session comes back
    and runs ``1``. It takes the parked gateway websocket over (the log says so): between its
    two websockets the session gets every line once, in order, the cell's idle and its
    ``execute_reply``. One more server start (60 s of grace), about 6 s.

    On f14a6ba the feed stayed open for the followed cell, so the gateway buffered nothing for
    the tab's session: ``AssertionError: assert 'line 0\\nline 1\\nline 2\\n' ==
    'line 0\\nline...e 6\\nline 7\\n'`` (nothing after the close)."""
    with gateway_server(gateway, grace=60) as srv:
        nb = Notebook(srv, "gw-blip.ipynb", EG_EXT)
        tab = KernelWebsocket(srv, nb.kernel_id, legacy=True)
        cell = nb.run(tab)
        nb.release(K + 1)
        first = until_line(tab, cell, K)
        tab.close()
        first += tab.backlog
        wait_until(
            lambda: nb.log_says("stays open") or gateway_connections(gateway, nb) == 1,
            HANG,
            "the server done with the tab's close (f14a6ba: its gateway websocket closed)",
        )
        nb.release(N)
        wait_until(
            lambda: gateway.kernel_model(nb.kernel_id)["execution_state"] == "idle",
            HANG,
            "the cell's end",
        )
        with KernelWebsocket(srv, nb.kernel_id, session_id=tab.session_id, legacy=True) as back:
            back.session.message_count = tab.session.message_count  # as in the test above
            back.collect_execution(back.execute("1"))
            second = [*back.backlog]
        handed_on = nb.log_says("is back: its websocket to the gateway")
    got = [m for m in [*first, *second] if m["parent_header"].get("msg_id") == cell]
    assert stdout_of(got, cell) == lines(N)
    idle = [
        m for m in got if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
    ]
    assert len(idle) == 1 and len([m for m in got if m["msg_type"] == "execute_reply"]) == 1
    assert handed_on
