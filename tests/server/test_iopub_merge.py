"""Nothing dropped by the server's IOPub rate: a tab over it gets what waits merged, paced.

A real jupyter_server as installed (``SharedChannelsConnection``, jupyter_server's default
rates: 1000 messages/s, 1 MB/s of stream, over 3 s), CurveZMQ kernels, one v1 websocket
client as JupyterLab's. Each cell floods IOPub far over the rate; the verdict is what the tab
ends with, folded as JupyterLab and ipywidgets fold it (:class:`harness.tab_view.TabView`),
against what the kernel sent: the same, with no "rate exceeded". The pacing is read from the
server's own account (its log line per cell), never from the tab's clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from harness.bursts import alternating_streams_code, thread_beside_cell_code
from harness.kernel_websocket import KernelWebsocket
from harness.polling import wait_until
from harness.server import JupyterServer
from harness.tab_view import TabView
from ipykernel_ext.server.websocket.budgets import MAX_AGE

pytestmark = pytest.mark.timeout(300)

KERNELS = ["python3-ext", "python3"]
RATE_EXCEEDED = re.compile(r"IOPub (message|data) rate exceeded")
#: jupyter_server's defaults: messages a second, over this window
RATE, WINDOW = 1000, 3.0
PEAK_LINE = re.compile(
    r"cell (\S+): (\d+) messages merged .*peak (\d+) counted messages .*, (\d+) sent late"
    r".*the longest wait here since the last such line ([\d.]+) s"
)


@pytest.fixture(scope="module", params=KERNELS)
def tab(request: pytest.FixtureRequest, server: JupyterServer) -> Iterator[KernelWebsocket]:
    kernel_id = server.start_kernel(request.param)
    with KernelWebsocket(server, kernel_id) as ws:
        ws.run("import ipywidgets as w\nfrom IPython.display import display, clear_output")
        yield ws
    server.shutdown_kernel(kernel_id)


def run(tab: KernelWebsocket, code: str) -> tuple[str, TabView]:
    msg_id = tab.execute(code)
    reply, iopub = tab.collect_execution(msg_id, timeout=240)
    assert reply["content"]["status"] == "ok", reply["content"]
    view = TabView(iopub)
    assert not RATE_EXCEEDED.search(view.text("stderr")), view.text("stderr")[:300]
    return msg_id, view


#: ``n`` lines, flushed every 1000: a stream message per 1000 lines. Left to itself ipykernel
#: sends what a cell printed every 0.2 s, so a fast machine sends a 100000-line flood as two
#: messages, the second held by the stream budget until idle lets it go, and nothing is merged
#: (CI once saw that). Fixed at n/1000 messages, the budget holds one while the next arrives
#: unless the cell takes minutes: the merge no longer hangs on the machine's speed.
PRINT_CODE = (
    "import sys\n"
    "for i in range({n}):\n"
    "    print(f'line {{i:07d}} ' + 'x' * 34)\n"
    "    if i % 1000 == 999: sys.stdout.flush()"
)


def printed(n: int) -> str:
    """What PRINT_CODE prints."""
    return "".join(f"line {i:07d} " + "x" * 34 + "\n" for i in range(n))


def report_line(server: JupyterServer, msg_id: str) -> re.Match[str]:
    """The server's line for one cell for the tab (logged at its ``idle``)."""

    def line() -> re.Match[str] | None:
        for match in PEAK_LINE.finditer(server.log_text()):
            if match.group(1) == msg_id:
                return match
        return None

    found = wait_until(line, timeout=30, what=f"the server's merge line for cell {msg_id}")
    assert found is not None
    return found


def merged_report(server: JupyterServer, msg_id: str) -> tuple[int, int]:
    """The server's account of one cell for the tab: (messages merged, the most counted
    messages in any window beyond those sent late). Late messages (older than 2.5 s) go past
    the rates by design, and how many there are depends on the machine's speed; the rest
    never pass the rate, however slow the machine."""
    found = report_line(server, msg_id)
    merged, peak, late = (int(found.group(i)) for i in (2, 3, 4))
    return merged, max(0, peak - late)


def longest_wait(server: JupyterServer, msg_id: str) -> tuple[int, float]:
    """The server's account of its own waits, at the cell's end: (messages sent late past
    the rates since the websocket opened, the longest any message waited in the pacer since
    the server's previous line for the websocket)."""
    found = report_line(server, msg_id)
    return int(found.group(4)), float(found.group(5))


def print_flood_arrives_whole_and_paced(
    server: JupyterServer, tab: KernelWebsocket, n: int, rate: int
) -> None:
    """PRINT_CODE's ``n`` lines reach the tab whole, in fewer stream messages than the kernel
    sent (merged), and the server's account of the cell says so, its peak within ``rate``
    messages a second."""
    msg_id, view = run(tab, PRINT_CODE.format(n=n))
    assert view.text() == printed(n)
    assert view.count("stream") < n // 1000  # fewer than the kernel sent: merged
    merged, peak = merged_report(server, msg_id)
    assert merged > 0
    assert peak <= rate * WINDOW


#: The most IOPub messages a cell of stock ipykernel sends here. Stock drops IOPub for a
#: subscriber its SNDHWM (1000) behind, as its side of the pipe counts it, and that count learns
#: of reads only every 500 (libzmq's low-water mark, (hwm + 1) / 2): it can be 499 stale when a
#: cell starts with nothing in flight (a cell of 900 lost 112 once, a print flood of 10000 lost
#: thousands, on a loaded machine). 450 plus the cell's statuses stay under 1000 however slowly
#: the server reads, so any loss on stock is the server's, which these tests are about.
STOCK_CELL = 450


def is_ours(tab: KernelWebsocket) -> bool:
    return "widget_state" in tab.kernel_info["content"].get("supported_features", [])


def cell_size(tab: KernelWebsocket, ours: int) -> int:
    """``ours`` messages in a cell for our kernel, :data:`STOCK_CELL` for stock."""
    return ours if is_ours(tab) else STOCK_CELL


def comm_id_of(tab: KernelWebsocket, comm: str) -> str:
    _, view = run(tab, f"print({comm}.comm_id)")
    return view.text().strip()


def image_ends_with_its_last_bytes(tab: KernelWebsocket, ours: int) -> tuple[str, TabView, int]:
    """An Image widget displayed, then its value set ``n`` times in one cell (``ours`` for our
    kernel, :data:`STOCK_CELL` for stock), 256 bytes each: the tab ends with the buffer at
    ``value`` holding the last bytes. The cell's msg_id, the tab's view of it, and ``n``."""
    run(tab, "img = w.Image(value=b'start', format='png'); display(img)")
    comm_id = comm_id_of(tab, "img.comm")
    n = cell_size(tab, ours)
    msg_id, view = run(tab, f"for i in range({n}): img.value = i.to_bytes(4, 'big') * 64")
    assert view.buffer_paths[comm_id] == [["value"]]
    assert [bytes(b) for b in view.buffers[comm_id]] == [(n - 1).to_bytes(4, "big") * 64]
    return msg_id, view, n


def test_a_200000_line_print_arrives_whole(server: JupyterServer, tab: KernelWebsocket) -> None:
    print_flood_arrives_whole_and_paced(server, tab, 200_000, RATE)


def test_a_slider_ends_on_the_kernels_last_value(
    server: JupyterServer, tab: KernelWebsocket
) -> None:
    run(tab, "s = w.IntSlider(max=30000); display(s)")
    comm_id = comm_id_of(tab, "s.comm")
    n = cell_size(tab, 10001)
    msg_id, view = run(tab, f"for i in range({n}): s.value = i")
    assert view.widgets[comm_id]["value"] == n - 1
    if not is_ours(tab):
        return  # stock's cell is within the rate: nothing to merge
    assert view.comm_messages(comm_id) < n - 1
    merged, peak = merged_report(server, msg_id)
    assert merged > 0 and peak <= RATE * WINDOW


def test_a_display_ends_on_its_last_update(tab: KernelWebsocket) -> None:
    n = cell_size(tab, 10000)
    _, view = run(
        tab,
        f"h = display('v start', display_id=True)\nfor i in range({n}): h.update(f'v{{i}}')",
    )
    assert [o["data"]["text/plain"] for o in view.outputs] == [f"'v{n - 1}'"]


def test_an_image_widget_ends_with_its_last_bytes(tab: KernelWebsocket) -> None:
    image_ends_with_its_last_bytes(tab, 5000)


#: Ours: twice the 3000 a window allows (RATE * WINDOW), so the second half is all paced;
#: ``--full-size``: the 20000 of the issue's case, which only paces longer.
CUSTOM_CELL, CUSTOM_CELL_FULL = 6000, 20_000


def test_a_custom_comms_messages_all_arrive_in_order(tab: KernelWebsocket, full_size: bool) -> None:
    """Custom comm messages cannot be merged: past the rate the server paces them (1000 a
    second) and the tab gets every one, in order. Ours: one cell of :data:`CUSTOM_CELL`
    (jupyter_server's own class drops what goes past the window's 3000, "rate exceeded"; the
    same with 20000 under ``--full-size``). Stock: 12 cells of STOCK_CELL back to back (5400
    go past the 3000 a window allows, so the server paces them)."""
    ours = CUSTOM_CELL_FULL if full_size else CUSTOM_CELL
    cells = [ours] if is_ours(tab) else [STOCK_CELL] * 12
    run(tab, "from comm import create_comm\nc = create_comm(target_name='ipykernel-ext-test')")
    comm_id = comm_id_of(tab, "c")
    got: list[int] = []
    for start in range(0, sum(cells), cells[0]):
        _, view = run(tab, f"for i in range({start}, {start + cells[0]}): c.send({{'i': i}})")
        got += [d["i"] for d in view.custom[comm_id]]
    assert got == list(range(sum(cells)))


def test_print_display_print_keeps_its_order(server: JupyterServer, tab: KernelWebsocket) -> None:
    # flush=True: a stream message per print (ipykernel would batch them otherwise). Half of
    # STOCK_CELL a side, on both kernels; 4.5 MB a side is over the stream budget at any
    # speed, so the server merges on both sides.
    n, width = STOCK_CELL // 2, 20000
    pad = "x" * width
    code = (
        f"pad = 'x' * {width}\n"
        f"for i in range({n}): print('a', i, pad, flush=True)\n"
        "display('middle')\n"
        f"for i in range({n}): print('b', i, pad, flush=True)\n"
    )
    msg_id, view = run(tab, code)
    kinds = [o["output_type"] for o in view.outputs]
    assert kinds == ["stream", "display_data", "stream"]
    first, _, last = view.outputs
    assert first["text"] == "".join(f"a {i} {pad}\n" for i in range(n))
    assert last["text"] == "".join(f"b {i} {pad}\n" for i in range(n))
    merged, _ = merged_report(server, msg_id)
    assert merged > 0


def test_an_animation_ends_on_its_last_frame(tab: KernelWebsocket) -> None:
    n = cell_size(tab, 10000) // 2  # two messages a frame
    code = f"for i in range({n}):\n    clear_output(wait=True)\n    display(f'frame {{i}}')\n"
    _, view = run(tab, code)
    assert [o["data"]["text/plain"] for o in view.outputs] == [f"'frame {n - 1}'"]


def test_the_legacy_protocol_gets_the_same(server: JupyterServer) -> None:
    """A websocket without the v1 subprotocol (JSON, buffers in jupyter_server's binary form)
    gets merged messages encoded the same way as every other."""
    kernel_id = server.start_kernel("python3-ext")
    try:
        with KernelWebsocket(server, kernel_id, legacy=True) as tab:
            run(tab, "import ipywidgets as w\nimg = w.Image(value=b'start'); display(img)")
            comm_id = comm_id_of(tab, "img.comm")
            _, view = run(tab, PRINT_CODE.format(n=50_000))
            assert view.text() == printed(50_000)
            _, view = run(tab, "for i in range(3000): img.value = i.to_bytes(4, 'big') * 64")
            assert [bytes(b) for b in view.buffers[comm_id]] == [(2999).to_bytes(4, "big") * 64]
            # Merged messages too carry the legacy protocol's top-level msg_id and msg_type
            # (the old main's lacked them).
            assert all(m["top_level"] == (m["msg_id"], m["msg_type"]) for m in view.messages)
    finally:
        server.shutdown_kernel(kernel_id)


def test_an_interrupted_flood_ends_with_every_line_then_its_error(
    server: JupyterServer, tab: KernelWebsocket
) -> None:
    """Interrupted mid-flood: what the cell printed arrives whole, in order, then the
    KeyboardInterrupt, then idle (merging never moves the error before the lines)."""
    msg_id = tab.execute("i = 0\nwhile True:\n    print(f'n {i}')\n    i += 1")
    interrupted: list[bool] = []

    def interrupt_once(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream" and not interrupted:
            interrupted.append(True)
            server.api("POST", f"api/kernels/{tab.kernel_id}/interrupt")

    reply, iopub = tab.collect_execution(msg_id, timeout=240, on_message=interrupt_once)
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    view = TabView(iopub)
    *_, error = view.outputs
    assert error["output_type"] == "error" and error["ename"] == "KeyboardInterrupt"
    lines = view.text().splitlines()
    assert lines == [f"n {i}" for i in range(len(lines))]


#: Traffic nothing merges, far over the rate of :func:`flood_server`: the cell, what it must
#: end with. ``FLOOD`` steps: 10000 messages or more.
FLOOD = 5000
#: The flood server's rates: 100 messages and 100 kB of stream a second (a tenth of
#: jupyter_server's defaults). At the defaults, a kernel slowed by a loaded machine sent a
#: 10000-message flood under 1000 a second once (two test workers and a busy loop on each of
#: 2 cores): nothing went late and the test proved nothing. A tenth of any speed a kernel
#: reaches on such a machine is still far over these.
FLOOD_RATES = (
    "--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit=100",
    "--ZMQChannelsWebsocketConnection.iopub_data_rate_limit=100000",
)
#: The threads' lines are 400 bytes: two threads flushing each line are many times the
#: flood server's message rate and stream budget. (With 4 kB lines, a busy machine's test
#: client, reading all of it in one Python thread, fell 64 MiB behind and the server closed it
#: as a slow reader: that is the fan-out tests' verdict, not this one's.)
PAD = "x" * 400
FLOODS = {
    "alternating": ("", alternating_streams_code(FLOOD)),
    "custom": (
        "from comm import create_comm\ncanvas = create_comm(target_name='ipykernel-ext-test')",
        f"for i in range(2 * {FLOOD}): canvas.send({{'i': i}})",
    ),
    "threads": thread_beside_cell_code(FLOOD, f" {PAD}"),
}


@pytest.fixture(scope="module")
def flood_server() -> Iterator[JupyterServer]:
    """The installed server at :data:`FLOOD_RATES`."""
    with JupyterServer(ipykernel_ext=None, extra_args=FLOOD_RATES) as srv:
        yield srv


@pytest.fixture(scope="module")
def flood_tab(flood_server: JupyterServer) -> Iterator[KernelWebsocket]:
    """A tab of our kernel on :func:`flood_server`. Ours only: stock ipykernel drops IOPub
    for a subscriber 1000 messages behind, so a stock flood above the rate loses messages in
    the kernel (the custom comm test runs stock's order in cells it does not drop)."""
    kernel_id = flood_server.start_kernel("python3-ext")
    with KernelWebsocket(flood_server, kernel_id) as ws:
        yield ws
    flood_server.shutdown_kernel(kernel_id)


@pytest.mark.parametrize("kind", list(FLOODS))
def test_a_flood_nothing_merges_arrives_whole_and_never_waits_past_the_bound(
    flood_server: JupyterServer, flood_tab: KernelWebsocket, kind: str
) -> None:
    """Issue 50: two streams flushed in turn, a custom comm's messages (a canvas, a game
    loop), a thread of an earlier cell printing beside the running cell. Nothing merges,
    far over the rate: the tab gets every message, in order, each cell's under its own
    parent; and the server's own account says messages went late past the rates (the line
    fell behind: else the test proved nothing) and none waited in the pacer past
    :data:`~ipykernel_ext.server.websocket.budgets.MAX_AGE` (5 s; what waits goes after
    2.5 s, as fast as the tab takes it). On 19e7e8a nothing went late (such a flood waited
    at the rate, minutes behind after minutes: issue 50) and the server said nothing of it."""
    server, tab = flood_server, flood_tab
    setup, code = FLOODS[kind]
    setup_id = ""
    comm_id = ""
    if setup:
        setup_id, _ = run(tab, setup)
    if kind == "custom":
        comm_id = comm_id_of(tab, "canvas")
    msg_id, view = run(tab, code)
    late, waited = longest_wait(server, msg_id)
    if kind == "alternating":
        assert view.text() == "".join(f"out {i}\n" for i in range(FLOOD))
        assert view.text("stderr") == "".join(f"err {i}\n" for i in range(FLOOD))
    elif kind == "custom":
        assert [d["i"] for d in view.custom[comm_id]] == list(range(2 * FLOOD))
    else:
        assert view.text() == "".join(f"fg {i} {PAD}\n" for i in range(FLOOD))

        # The thread's last flush may reach IOPub after the cell's idle (ipykernel flushes a
        # thread's stream on its IO thread): read on until its last line, a barrier.
        def of_the_thread(m: dict[str, Any]) -> bool:
            return m["parent_header"].get("msg_id") == setup_id

        thread = [m for m in tab.backlog if of_the_thread(m)]
        tab.backlog = [m for m in tab.backlog if not of_the_thread(m)]
        while not TabView(thread).text().endswith(f"bg {FLOOD - 1} {PAD}\n"):
            thread.append(tab.recv_until(of_the_thread, 60))
        assert TabView(thread).text() == "".join(f"bg {i} {PAD}\n" for i in range(FLOOD))
    # Held back (a message waited a second or more: the rate or the stream budget stopped
    # it), else the test proved nothing; and never past the bound.
    assert 1.0 <= waited <= MAX_AGE, (late, waited)
