"""Nothing dropped by rate in gateway mode either, and the page shielded there too.

A notebook server with ``--gateway-url`` and the extension as installed
(``GatewayOutputsConnection``), a real Enterprise Gateway 3.3 launching ours (``eg_ext``) and
stock (``eg_stock``), a legacy-protocol websocket as JupyterLab's in gateway mode. Neither
jupyter_server's gateway websocket nor Enterprise Gateway's handler drops by rate, so every
message reaches our server, which merges and paces what a tab cannot take. Verdicts as in
test_iopub_merge.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from harness.gateway import EG_EXT, EG_STOCK, EnterpriseGateway, gateway_command
from harness.kernel_websocket import KernelWebsocket
from harness.polling import wait_until
from harness.server import JupyterServer
from harness.tab_view import TabView

from .test_iopub_merge import (
    WINDOW,
    cell_size,
    comm_id_of,
    image_ends_with_its_last_bytes,
    is_ours,
    merged_report,
    print_flood_arrives_whole_and_paced,
    run,
)

pytestmark = pytest.mark.timeout(400)

#: The message rate of this module's server (messages a second a tab may get).
GATEWAY_RATE = 100

_COMMAND = gateway_command()
if isinstance(_COMMAND, str):
    pytest.skip(_COMMAND, allow_module_level=True)


@pytest.fixture(scope="module")
def gateway() -> Iterator[EnterpriseGateway]:
    with EnterpriseGateway() as gw:
        yield gw


@pytest.fixture(scope="module")
def server(gateway: EnterpriseGateway) -> Iterator[JupyterServer]:
    srv = JupyterServer(
        ipykernel_ext=None,  # as installed: GatewayOutputsConnection
        encryption=False,  # Enterprise Gateway 3.3 launches with jupyter_client 6: no curve
        extra_args=[
            f"--gateway-url={gateway.url}",
            '--ServerApp.jpserver_extensions={"jupyter_server_ydoc": False}',
            # A tenth of the default: the gateway's extra hop delivers some floods under
            # 1000 messages a second, and these tests must see them over the rate.
            f"--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit={GATEWAY_RATE}",
        ],
        stop_timeout=20,
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module", params=[EG_EXT, EG_STOCK])
def tab(request: pytest.FixtureRequest, server: JupyterServer) -> Iterator[KernelWebsocket]:
    kernel_id = server.start_kernel(request.param)
    with KernelWebsocket(server, kernel_id, legacy=True) as ws:
        ws.run("import ipywidgets as w\nfrom IPython.display import display, clear_output")
        yield ws
    server.shutdown_kernel(kernel_id)


def test_a_print_flood_arrives_whole_and_paced(server: JupyterServer, tab: KernelWebsocket) -> None:
    print_flood_arrives_whole_and_paced(server, tab, 100_000, GATEWAY_RATE)


#: Our kernel's cells here: ten times what the tab may get in a window (``GATEWAY_RATE`` a
#: second), so they merge however fast the gateway delivers above the rate. More proves
#: nothing more and costs time: the gateway relays a few hundred a second (an image of 10000
#: updates took 53 s); tests/server/test_iopub_merge.py runs the local sizes.
GATEWAY_CELL = int(10 * GATEWAY_RATE * WINDOW) + 1


def test_a_slider_ends_on_the_kernels_last_value(tab: KernelWebsocket) -> None:
    run(tab, "s = w.IntSlider(max=30000); display(s)")
    comm_id = comm_id_of(tab, "s.comm")
    n = cell_size(tab, GATEWAY_CELL)
    _, view = run(tab, f"for i in range({n}): s.value = i")
    assert view.widgets[comm_id]["value"] == n - 1


def test_an_animation_ends_on_its_last_frame(tab: KernelWebsocket) -> None:
    n = cell_size(tab, 3000) // 2  # two messages a frame
    code = f"for i in range({n}):\n    clear_output(wait=True)\n    display(f'frame {{i}}')\n"
    _, view = run(tab, code)
    assert [o["data"]["text/plain"] for o in view.outputs] == [f"'frame {n - 1}'"]


def test_an_image_widget_ends_with_its_last_bytes(
    server: JupyterServer, tab: KernelWebsocket
) -> None:
    """A widget state with buffers comes from the gateway in jupyter_server's binary form: it
    reaches the tab, counted and merged as any other. On the old main (and stock
    jupyter_server) the first one ended the server's reading loop (it decoded every frame as
    UTF-8): the cell that displays the Image never ended at the tab, ours or stock's."""
    msg_id, view, n = image_ends_with_its_last_bytes(tab, GATEWAY_CELL)
    if is_ours(tab):  # over the rate unless the gateway delivered under 100 a second
        updates = [m for m in view.messages if m["msg_type"] == "comm_msg"]
        assert len(updates) < n
        merged, peak = merged_report(server, msg_id)
        assert merged > 0 and peak <= GATEWAY_RATE * WINDOW


#: Just under tornado's largest websocket message (10 MiB), the most one message from the
#: gateway may be (jupyter_server's websocket to it keeps tornado's default).
BIG = 9_000_000

#: A tab that stops reading: its socket's receive buffer (bytes).
SLOW_RCVBUF = 4096

#: The overflow: four displays of ``BIG`` waiting (each charged its frames and its decoded
#: text, :mod:`ipykernel_ext.server.websocket.reading`) behind one ``BIG`` being written pass
#: the gateway class's 64 MiB; three do not. Seven: 19e7e8a charged frames alone, and
#: overflowed at the seventh.
OVERFLOW_CODE = f"for i in range(7): display({{'text/plain': str(i) * {BIG}}}, raw=True)"

#: The issue's cell: 50 lines, a slider moved to 29 between them, then an error.
SLIDER_CELL = (
    "for i in range(50):\n"
    "    print(f'line {i}', flush=True)\n"
    "    if i < 30: slider.value = i\n"
    "raise ValueError('the cell ends')\n"
)


def test_a_slow_tab_closed_by_overflow_gets_what_the_server_held_when_it_comes_back(
    gateway: EnterpriseGateway, server: JupyterServer
) -> None:
    """A tab stops reading behind a 9 MB display; a cell prints 50 lines with a slider moved
    to 29 between them and fails; the next cell's displays take what the server holds for the
    tab past 64 MiB, and it closes the websocket (1013); the tab's session comes back. What
    the server had read from the gateway and held (the gateway will not send it again) is
    handed to the session's next websocket: between the two websockets the session gets
    every message of the cell once, in order (the lines, the slider at 29, the error, its
    idle, its reply), then the displays, in order, up to the one that overflowed at least
    (which later ones it gets depends on when it comes back: none is shown twice).
    Barriers: the server's log line of the overflow (it has read all of the cell by then),
    the gateway's count of the kernel's websockets (the tab's closed). On 19e7e8a
    ``GatewayOutputsConnection.disconnect`` dropped what the pacer and the outbox held: the
    session got no line of the cell."""
    kernel_id = server.start_kernel(EG_EXT)
    try:
        tab = KernelWebsocket(server, kernel_id, legacy=True, rcvbuf=SLOW_RCVBUF)
        session = tab.session_id
        tab.run("import ipywidgets as w\nslider = w.IntSlider(min=-1, value=-1); display(slider)")
        comm_id = comm_id_of(tab, "slider.comm")
        connected = int(gateway.kernel_model(kernel_id)["connections"])  # with the feed's
        tab.pause_reading()
        tab.execute(f"display({{'text/plain': 'f' * {BIG}}}, raw=True)")
        cell = tab.execute(SLIDER_CELL, stop_on_error=False)
        tab.execute(OVERFLOW_CODE)
        wait_until(
            lambda: (
                f"Closing websocket {session} of gateway kernel {kernel_id}: it did not read"
                in server.log_text()
            ),
            120,
            "the server closing the slow tab",
        )
        got: list[dict[str, Any]] = list(tab.backlog)
        tab.close()
        with contextlib.suppress(ConnectionError):
            while True:
                got.append(tab.recv(60))
        wait_until(
            lambda: int(gateway.kernel_model(kernel_id)["connections"]) < connected,
            60,
            "the tab's websocket to the gateway closed",
        )
        with KernelWebsocket(server, kernel_id, session_id=session, legacy=True) as back:
            got += back.backlog  # the replay comes before the kernel_info reply
    finally:
        server.shutdown_kernel(kernel_id)

    def of(msg_type: str) -> list[int]:
        return [
            i
            for i, m in enumerate(got)
            if m["parent_header"].get("msg_id") == cell and m["msg_type"] == msg_type
        ]

    ours = [m for m in got if m["parent_header"].get("msg_id") == cell]
    view = TabView([m for m in ours if m["channel"] == "iopub"])
    assert view.text() == "".join(f"line {i}\n" for i in range(50))
    assert view.widgets[comm_id]["value"] == 29
    assert [o["output_type"] for o in view.outputs] == ["stream", "error"]
    (error,) = of("error")
    idle = [i for i in of("status") if got[i]["content"]["execution_state"] == "idle"]
    assert len(idle) == 1 and len(of("execute_reply")) == 1
    assert max(of("stream")) < error < idle[0]
    displays = [
        m["content"]["data"]["text/plain"][0]
        for m in got
        if m["msg_type"] == "display_data" and len(m["content"]["data"]["text/plain"]) == BIG
    ]
    # The one that overflowed (the fourth) and those before it were held. The kernel's
    # displays between the close and the session's return went to the feed alone (the
    # server's own websocket to the kernel stays: the gateway buffers nothing for the
    # session; the notebook has them, PROTOCOL section 6); those after its return reach it.
    # So: the held four, then later ones once each, in order.
    assert displays[:4] == ["0", "1", "2", "3"], displays
    assert [int(d) for d in displays] == sorted({int(d) for d in displays}), displays
