"""kernel/busy/answers.py in process: which shell messages are claimed, and what a claimed one gets.

:class:`BusyAnswers` runs over a :class:`Parts` of real pieces: a keyed ``Session``, a ROUTER
shell socket with DEALER clients and a PAIR for IOPub (``inproc://``), the process's comm
manager with ipywidgets' control target, a tornado IOLoop. A client's message is received as
the shell-channel thread receives it (frames, not copied) and given to ``claims``/``answer``;
"busy" is what the main shell records. Absence is shown by order: after something that must
send nothing, a second request's reply (or status) is the first to arrive.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import comm
import pytest
import zmq
from jupyter_client.session import Session
from tornado.ioloop import IOLoop

from harness.inproc import HANG_MS, bound
from harness.inproc import Frontend as Client
from harness.widget_control import CONTROL_TARGET
from ipykernel_ext.kernel.busy.answers import BusyAnswers
from ipykernel_ext.kernel.busy.main_shell_status import MainShellStatus
from ipykernel_ext.kernel.widgets.control_comm import ControlCommAnswer

w = pytest.importorskip("ipywidgets")
from ipywidgets.widgets.widget import Widget  # noqa: E402

KEY = b"busy-answers-inprocess"
LOG = "tests.unit.busy_answers"
OTHER_TARGET = "tests.unit.other-target"


class Parts:
    """What BusyAnswers uses of the kernel (``KernelParts``): stock's replies and statuses
    through the real session and sockets; the process's comm manager (ipykernel's, which the
    comms it makes leave when they close)."""

    def __init__(
        self, session: Session, shell: zmq.Socket[Any], iopub: zmq.Socket[Any], io_loop: IOLoop
    ) -> None:
        self.session = session
        self.shell_stream = shell
        self.iopub_socket = iopub
        self.comm_manager = comm.get_comm_manager()
        self.io_loop = io_loop
        self.log = logging.getLogger(LOG)

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        content = {"status": "ok", "protocol_version": "5.4", "implementation": "parts"}
        self.session.send(stream, "kernel_info_reply", content, parent, ident)

    def publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        content = {"execution_state": status}
        self.session.send(self.iopub_socket, "status", content, parent, ident=b"kernel.status")


class Rig:
    """The kernel's shell and IOPub sockets, its session, BusyAnswers and the clients."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()
        self.url, self.shell = bound(self.ctx, zmq.ROUTER, "shell")
        iopub_url, self.iopub = bound(self.ctx, zmq.PAIR, "iopub")
        self.iopub_reader = self.ctx.socket(zmq.PAIR)
        self.iopub_reader.linger = 0
        self.iopub_reader.connect(iopub_url)
        self.session = Session(key=KEY)
        self.io_loop = IOLoop(make_current=False)
        self.parts = Parts(self.session, self.shell, self.iopub, self.io_loop)
        self.status = MainShellStatus()
        self.answers = BusyAnswers(
            self.parts, self.status, publish_status=self.parts.publish_status, enabled=lambda: True
        )
        self.manager = self.parts.comm_manager
        self._comms_before = set(self.manager.comms)
        self._targets_before = dict(self.manager.targets)
        # What ipywidgets registers in a kernel (ipywidgets.register_comm_target).
        self.manager.register_target(CONTROL_TARGET, Widget.handle_control_comm_opened)
        self.manager.register_target(OTHER_TARGET, lambda comm, msg: None)
        self.clients: list[Client] = []
        self.a = self.page()
        self.b = self.page()

    def page(self, key: bytes = KEY) -> Client:
        """A new frontend (a page loaded or reloaded): a new session."""
        client = Client(self.ctx, self.url, key)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for comm_id in set(self.manager.comms) - self._comms_before:
            self.manager.comms[comm_id].close()
        self.manager.targets.clear()
        self.manager.targets.update(self._targets_before)
        Widget._control_comm = None
        self.io_loop.close()
        for client in self.clients:
            client.close()
        self.ctx.destroy(linger=0)

    # --- the main shell's state ---------------------------------------------------------

    def busy(self) -> dict[str, Any]:
        """The main shell starts running a cell of a third client; that request."""
        running = Session(key=KEY).msg("execute_request", {"code": "cell()"})
        self.status.record("busy", running)
        return running

    def idle(self) -> None:
        self.status.record("idle", {})

    # --- a message through the sockets --------------------------------------------------

    def receive(self) -> tuple[list[Any], list[Any]]:
        """What the shell-channel thread gets: identities and the frames after them."""
        assert self.shell.poll(HANG_MS), "nothing reached the shell socket"
        idents, frames = self.session.feed_identities(
            self.shell.recv_multipart(copy=False), copy=False
        )
        return idents, frames

    def deliver(self, client: Client, msg: dict[str, Any]) -> tuple[bool, list[Any], list[Any]]:
        """``client`` sends ``msg``; whether BusyAnswers claims it, and its frames."""
        client.send(msg)
        idents, frames = self.receive()
        return self.answers.claims(frames), idents, frames

    def claims(self, client: Client, msg: dict[str, Any]) -> bool:
        return self.deliver(client, msg)[0]

    def answer(self, idents: list[Any], frames: list[Any]) -> None:
        self.run(lambda: self.answers.answer(idents, frames))

    def claim_and_answer(self, client: Client, msg: dict[str, Any]) -> None:
        claimed, idents, frames = self.deliver(client, msg)
        assert claimed, msg["header"]["msg_type"]
        self.answer(idents, frames)

    def run(self, coroutine: Callable[[], Awaitable[Any]]) -> Any:
        return self.io_loop.run_sync(coroutine, timeout=HANG_MS / 1000)

    def main_shell_handles(
        self, idents: list[Any], frames: list[Any], handler: Callable[..., Any] | None = None
    ) -> None:
        """Stock's path for a message not claimed: verified, the main shell's handler (the
        comm manager's by default), then the main shell's idle for it."""
        msg = self.session.deserialize(frames, content=True, copy=False)
        handler = handler or getattr(self.manager, msg["header"]["msg_type"])
        handler(self.shell, idents, msg)
        self.answers.finished(msg)

    def published(self) -> dict[str, Any]:
        assert self.iopub_reader.poll(HANG_MS), "nothing published on IOPub"
        _, msg = self.session.recv(self.iopub_reader, mode=0)
        assert msg is not None
        return msg


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.close()


def control_open(client: Client, version: Any = "1.0.0") -> dict[str, Any]:
    """ipywidgets' manager's comm_open, metadata.version as given (None: no version)."""
    metadata = {} if version is None else {"version": version}
    content = {"comm_id": uuid.uuid4().hex, "target_name": CONTROL_TARGET, "data": {}}
    return client.msg("comm_open", content, metadata=metadata)


def comm_id_of(msg: dict[str, Any]) -> str:
    return msg["content"]["comm_id"]


def request_states(client: Client, comm_id: str, method: Any = "request_states") -> dict[str, Any]:
    return client.msg("comm_msg", {"comm_id": comm_id, "data": {"method": method}})


def opened_by_main_shell(rig: Rig, msg: dict[str, Any]) -> str:
    """``msg`` (a comm_open) on stock's path while idle: the main shell opens the comm."""
    rig.idle()
    claimed, idents, frames = rig.deliver(rig.a, msg)
    assert not claimed
    rig.main_shell_handles(idents, frames)
    comm_id = comm_id_of(msg)
    assert comm_id in rig.manager.comms
    return comm_id


def open_mid_cell(rig: Rig) -> str:
    """A cell starts; page ``b`` opens a control comm, answered here; its comm_id."""
    rig.busy()
    opening = control_open(rig.b)
    rig.claim_and_answer(rig.b, opening)
    return comm_id_of(opening)


def parent_id(msg: dict[str, Any]) -> str:
    return msg["parent_header"]["msg_id"]


def msg_id(msg: dict[str, Any]) -> str:
    return msg["header"]["msg_id"]


# --- MainShellStatus ------------------------------------------------------------------------


def test_main_shell_status_is_what_was_last_published() -> None:
    status = MainShellStatus()
    request = Session(key=KEY).msg("execute_request", {"code": "1"})
    assert not status.busy and status.running is None
    status.record("busy", request)
    # mypy keeps status.busy and .running narrowed across record(): forget it (mypy#9457)
    status = status
    assert status.busy and status.running is request
    status.record("idle", request)
    status = status
    assert not status.busy and status.running is None
    status.record("busy", {})  # a busy without a parent names no request: not busy
    assert not status.busy

    assert not status.is_main_thread()  # no main shell thread yet
    status.thread = threading.current_thread()
    elsewhere: list[bool] = []
    other = threading.Thread(target=lambda: elsewhere.append(status.is_main_thread()))
    other.start()
    other.join(HANG_MS / 1000)
    assert status.is_main_thread() and elsewhere == [False]


# --- which messages are claimed --------------------------------------------------------------


def test_info_requests_are_claimed_for_the_main_shell_only_while_it_is_busy(rig: Rig) -> None:
    for msg_type in ("kernel_info_request", "comm_info_request"):
        rig.idle()
        on_idle = rig.a.msg(msg_type, {})
        assert not rig.claims(rig.a, on_idle), msg_type
        rig.answers.finished(on_idle)  # the main shell answers it (and goes idle) first
        rig.busy()
        assert rig.claims(rig.a, rig.a.msg(msg_type, {})), msg_type
        # A subshell is not blocked by the main shell's cell: stock's routing answers it.
        assert not rig.claims(rig.a, rig.a.msg(msg_type, {}, subshell_id="sub-1")), msg_type


# An info request never overtakes its own client's main-shell messages (stock's reply order
# within one client), and nothing else holds it back: each case below on a busy main shell.


def test_an_info_request_waits_for_its_clients_queued_messages(rig: Rig) -> None:
    rig.busy()
    cell = rig.a.msg("execute_request", {"code": "1 / 0", "stop_on_error": True})
    assert not rig.claims(rig.a, cell), "a's cell is for the main shell"
    info = rig.a.msg("kernel_info_request", {})
    comm_info = rig.a.msg("comm_info_request", {})
    # a asked after its cell: the replies come in that order, as on stock.
    assert not rig.claims(rig.a, info), "kernel_info answered ahead of a's cell"
    assert not rig.claims(rig.a, comm_info), "comm_info answered ahead of a's cell"
    # The main shell finishes a's messages in order; only the last one releases a.
    rig.answers.finished(cell)
    probe = rig.a.msg("kernel_info_request", {})
    assert not rig.claims(rig.a, probe), "answered while info and comm_info were still queued"
    for queued in (info, comm_info, probe):
        rig.answers.finished(queued)
    assert rig.claims(rig.a, rig.a.msg("kernel_info_request", {})), "a not released"


def test_another_client_is_answered_at_once(rig: Rig) -> None:
    """b (a page reloaded mid-cell) has nothing of its own queued behind a's cell."""
    rig.busy()
    assert not rig.claims(rig.a, rig.a.msg("execute_request", {"code": "1 / 0"}))
    assert rig.claims(rig.b, rig.b.msg("kernel_info_request", {})), "b's kernel_info held back"
    assert rig.claims(rig.b, rig.b.msg("comm_info_request", {})), "b's comm_info held back"


def test_a_queued_completion_holds_back_info_requests_only(rig: Rig) -> None:
    """Not only user code: a completion queued on the main shell is answered first, too; the
    client's control comm is still answered mid-cell."""
    rig.busy()
    c = rig.page()
    assert not rig.claims(c, c.msg("complete_request", {"code": "pri", "cursor_pos": 3}))
    assert not rig.claims(c, c.msg("comm_info_request", {})), "comm_info overtook a completion"
    assert rig.claims(c, control_open(c)), "the control comm was held back by a completion"


def test_a_message_to_a_subshell_holds_nothing_back(rig: Rig) -> None:
    """It is not queued behind the cell."""
    rig.busy()
    d = rig.page()
    assert not rig.claims(d, d.msg("execute_request", {"code": "2"}, subshell_id="sub-1"))
    assert rig.claims(d, d.msg("kernel_info_request", {})), "held back by a subshell's request"


def test_a_message_naming_no_client_holds_nothing_back(rig: Rig) -> None:
    """An empty session is no client whose order there is to keep."""
    rig.busy()
    e = rig.page()
    assert not rig.claims(e, e.msg("execute_request", {"code": "3"}, session=""))
    assert rig.claims(e, e.msg("kernel_info_request", {}, session="")), "held back by no one"


def test_busy_again_unless_the_cells_own_client_keeps_stocks_statuses() -> None:
    """MainShellStatus.busy_again_after: the rule ExtKernel._publish_status follows."""
    status = MainShellStatus()
    cells_client, other_client = Session(key=KEY), Session(key=KEY)
    cell = cells_client.msg("execute_request", {"code": "cell()"})
    own_debug = cells_client.msg("debug_request", {"command": "variables"})
    own_subshell_cell = cells_client.msg("execute_request", {"code": "1"})
    own_create_subshell = cells_client.msg("create_subshell_request", {})
    other_create_subshell = other_client.msg("create_subshell_request", {})
    other_kernel_info = other_client.msg("kernel_info_request", {})
    # The main shell is idle: nothing to say.
    assert status.busy_again_after(other_create_subshell, "control") is None
    status.record("busy", cell)
    # The cell's own client sees stock's statuses where ipykernel's tests count them: a
    # request whose status the server does not track (the debugger at a breakpoint), and
    # its cells on a subshell.
    assert status.busy_again_after(own_debug, "control") is None
    assert status.busy_again_after(own_subshell_cell, "shell") is None
    # Its other requests set the server's state: busy again for the cell (JupyterLab's
    # create_subshell_request on control, its comm messages on a subshell).
    assert status.busy_again_after(own_create_subshell, "control") is cell
    own_comm = cells_client.msg("comm_msg", {"comm_id": "c", "data": {}})
    assert status.busy_again_after(own_comm, "shell") is cell
    # Any request of another client (a page reloaded mid-cell): busy again, tracked or not.
    assert status.busy_again_after(other_create_subshell, "control") is cell
    assert status.busy_again_after(other_kernel_info, "shell") is cell
    # An idle whose request names no client: busy again, as for any other client.
    assert status.busy_again_after(None, "control") is cell
    assert status.busy_again_after({"header": {"session": ""}}, "shell") is cell
    status.record("idle", cell)
    assert status.busy_again_after(other_create_subshell, "control") is None


def test_other_shell_requests_are_never_claimed(rig: Rig) -> None:
    rig.busy()
    for msg_type, content in [
        ("execute_request", {"code": "1", "silent": False}),
        ("complete_request", {"code": "pri", "cursor_pos": 3}),
        ("inspect_request", {"code": "print", "cursor_pos": 5, "detail_level": 0}),
        ("history_request", {"hist_access_type": "tail", "n": 1}),
        ("is_complete_request", {"code": "for"}),
    ]:
        assert not rig.claims(rig.a, rig.a.msg(msg_type, content)), msg_type


@pytest.mark.parametrize(
    ("version", "claimed"),
    [
        ("1.0.0", True),
        ("1.9", True),
        ("2.0.0", False),  # ipywidgets refuses it (and closes the comm): left to it
        ("10.0.0", False),  # the major version, not a prefix of it
        ("", False),
        (None, False),  # no version at all
        (1, False),  # not a string
    ],
)
def test_control_comm_open_is_claimed_mid_cell_for_protocol_major_1(
    rig: Rig, version: Any, claimed: bool
) -> None:
    rig.busy()
    assert rig.claims(rig.a, control_open(rig.a, version)) is claimed
    rig.idle()  # an idle kernel opens it on the main shell, in stock's order
    assert not rig.claims(rig.b, control_open(rig.b, version))


def test_comm_open_to_another_or_unregistered_target_is_not_claimed(rig: Rig) -> None:
    rig.busy()
    # Each from a new page: a comm_open not claimed holds its sender's next ones back.
    page = rig.page()
    other = page.msg("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": OTHER_TARGET})
    assert not rig.claims(page, other)
    # Without ipywidgets' control target registered (ipywidgets imported, not loaded in the
    # kernel), stock answers "no such target" after the cell.
    del rig.manager.targets[CONTROL_TARGET]
    page = rig.page()
    assert not rig.claims(page, control_open(page))
    rig.manager.register_target(CONTROL_TARGET, Widget.handle_control_comm_opened)
    page = rig.page()
    assert rig.claims(page, control_open(page))


@pytest.mark.parametrize(
    "content",
    [
        b"[1, 2]",  # not an object
        b"null",
        b"\xff not JSON",
        b'"not an object"',
        {"target_name": CONTROL_TARGET, "data": {}},  # no comm_id
        {"comm_id": 5, "target_name": CONTROL_TARGET, "data": {}},
    ],
    ids=["list", "null", "not-json", "string", "no-comm_id", "int-comm_id"],
)
def test_malformed_comm_open_is_left_to_stock(rig: Rig, content: Any) -> None:
    rig.busy()
    assert not rig.claims(rig.a, rig.a.msg("comm_open", content, metadata={"version": "1.0.0"}))


def test_a_header_that_cannot_be_read_is_left_to_stock_and_holds_nobody_back(rig: Rig) -> None:
    rig.busy()
    frames = rig.a.session.serialize(rig.a.msg("execute_request", {"code": "1"}))
    frames[2] = b"\xff not a header"  # [DELIM, signature, header, ...]
    rig.a.socket.send_multipart(frames)
    _, received = rig.receive()
    assert not rig.answers.claims(received)
    # Nothing was noted for a message whose sender is unknown: a's control comm is answered.
    assert rig.claims(rig.a, control_open(rig.a))


def test_request_states_is_claimed_mid_cell_only_on_a_control_comm(rig: Rig) -> None:
    control = opened_by_main_shell(rig, control_open(rig.a))
    other = rig.a.msg("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": OTHER_TARGET})
    other_id = opened_by_main_shell(rig, other)
    rig.busy()

    def claimed(comm_id: str, data: Any = None) -> bool:
        page = rig.page()  # each from a new page: one not claimed holds its sender back
        content = {"comm_id": comm_id, "data": data or {"method": "request_states"}}
        return rig.claims(page, page.msg("comm_msg", content))

    assert claimed(control)
    assert not claimed(uuid.uuid4().hex)  # an unknown comm
    assert not claimed(other_id)  # not the control target
    # Another method, or data that is not an object: ipywidgets' handler, after the cell.
    assert not claimed(control, {"method": "other"})
    assert not claimed(control, ["request_states"])
    rig.idle()  # the main shell's own control comm: stock's order when idle
    assert not claimed(control)


def test_a_clients_control_comm_waits_behind_its_own_user_code(rig: Rig) -> None:
    rig.busy()
    cell = rig.a.msg("execute_request", {"code": "w.IntSlider()"})
    assert not rig.claims(rig.a, cell)  # stock's routing: queued on the main shell
    # a expects the states after its cell, as stock answers; b (a reloaded page) does not wait.
    opening = control_open(rig.a)
    assert not rig.claims(rig.a, opening)  # queued behind the cell, on the main shell
    assert rig.claims(rig.b, control_open(rig.b))
    # A comm message is user code too: c's comm message holds c's control comm back.
    c = rig.page()
    assert not rig.claims(c, c.msg("comm_msg", {"comm_id": uuid.uuid4().hex, "data": {}}))
    assert not rig.claims(c, control_open(c))
    # The main shell finishes a's cell, then a's comm_open (it goes idle for each).
    rig.answers.finished(cell)
    rig.answers.finished(opening)
    assert rig.claims(rig.a, control_open(rig.a))


def test_only_the_clients_last_message_finishing_releases_it(rig: Rig) -> None:
    rig.busy()
    first = rig.a.msg("execute_request", {"code": "1"})
    second = rig.a.msg("execute_request", {"code": "2"})
    assert not rig.claims(rig.a, first)
    assert not rig.claims(rig.a, second)
    rig.answers.finished(first)
    probe = control_open(rig.a)
    assert not rig.claims(rig.a, probe)  # its second cell is still queued, then the probe
    rig.answers.finished(second)
    rig.answers.finished(probe)  # the main shell handled the probe too: nothing left
    assert rig.claims(rig.a, control_open(rig.a))
    # A cell on a subshell does not block the main shell: it holds nothing back.
    on_subshell = rig.a.msg("execute_request", {"code": "3"}, subshell_id="sub-1")
    assert not rig.claims(rig.a, on_subshell)
    assert rig.claims(rig.a, control_open(rig.a))


# --- what a claimed message gets -------------------------------------------------------------


def test_kernel_info_mid_cell_is_answered_between_busy_and_idle(rig: Rig) -> None:
    rig.busy()
    request = rig.b.msg("kernel_info_request", {})
    rig.claim_and_answer(rig.b, request)
    reply = rig.b.reply()
    assert reply["msg_type"] == "kernel_info_reply" and parent_id(reply) == msg_id(request)
    assert reply["content"]["implementation"] == "parts"  # the kernel's own handler answered
    statuses = [rig.published(), rig.published()]
    assert [(m["msg_type"], m["content"]["execution_state"]) for m in statuses] == [
        ("status", "busy"),
        ("status", "idle"),
    ]
    assert {parent_id(m) for m in statuses} == {msg_id(request)}
    # Routed to b only: a's next reply is the answer to a's own request.
    other = rig.a.msg("kernel_info_request", {})
    rig.claim_and_answer(rig.a, other)
    assert parent_id(rig.a.reply()) == msg_id(other)


def test_control_comm_opened_mid_cell_answers_until_closed(
    rig: Rig, widgets: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    slider, image = widgets
    comm_id = open_mid_cell(rig)  # nothing is sent for it (as ipywidgets)
    rig.idle()  # a control comm opened here stays here, busy or not
    with caplog.at_level(logging.WARNING, logger=LOG):
        rig.claim_and_answer(rig.b, request_states(rig.b, comm_id, method="other"))
    assert f"Widget control comm {comm_id}: unknown method 'other' ignored" in caplog.text
    # Data that is not an object: ignored too.
    rig.claim_and_answer(rig.b, rig.b.msg("comm_msg", {"comm_id": comm_id, "data": "no object"}))
    request = request_states(rig.b, comm_id)
    rig.claim_and_answer(rig.b, request)

    # The first message on IOPub: neither the comm_open nor the other method sent anything,
    # and no status is published for a comm message answered here.
    sent = rig.published()
    assert sent["msg_type"] == "comm_msg" and parent_id(sent) == msg_id(request)
    data = sent["content"]["data"]
    assert sent["content"]["comm_id"] == comm_id and data["method"] == "update_states"
    state = data["states"][slider.model_id]
    assert state["model_name"] == "IntSliderModel" and state["state"]["value"] == 7
    path = [image.model_id, "state", "value"]
    assert path in data["buffer_paths"]
    assert bytes(sent["buffers"][data["buffer_paths"].index(path)]) == b"\x89PNG in-process"

    rig.claim_and_answer(rig.b, rig.b.msg("comm_close", {"comm_id": comm_id, "data": {}}))
    # Closed: its messages take stock's path again (an idle kernel: nothing claimed).
    assert not rig.claims(rig.b, request_states(rig.b, comm_id))


def test_after_the_frontend_closes_changes_since_the_snapshot_are_sent(
    rig: Rig, widgets: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    slider, image = widgets
    comm_id = open_mid_cell(rig)
    rig.claim_and_answer(rig.b, request_states(rig.b, comm_id))
    assert rig.published()["content"]["data"]["method"] == "update_states"
    # The cell goes on: one widget changes, one is closed, after the snapshot.
    slider.value = 8
    image_id = image.model_id
    image.close()
    claimed, idents, frames = rig.deliver(
        rig.b, rig.b.msg("comm_close", {"comm_id": comm_id, "data": {}})
    )
    assert claimed

    async def close_then_after_the_reconcile() -> None:
        await rig.answers.answer(idents, frames)
        # The reconcile is a callback on the main IOLoop: one queued after it runs after it.
        done = asyncio.Event()
        rig.io_loop.add_callback(done.set)
        await done.wait()

    with caplog.at_level(logging.INFO, logger=LOG):
        rig.run(close_then_after_the_reconcile)
    closing = rig.published()
    assert closing["msg_type"] == "comm_close" and closing["content"]["comm_id"] == image_id
    # The slider's update goes through its own comm (no kernel in this process sends it).
    assert "Widget states: 2 update(s) sent after a busy reload" in caplog.text


def test_wrongly_signed_or_replayed_claimed_messages_are_refused(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.busy()
    forger = rig.page(key=b"not-the-kernels-key")
    # The path is picked before verification: the forged request is claimed...
    claimed, idents, frames = rig.deliver(forger, forger.msg("kernel_info_request", {}))
    assert claimed
    with caplog.at_level(logging.WARNING, logger=LOG):
        rig.answer(idents, frames)
        # ...and refused. A replay of a message already answered is refused the same way.
        replayed = rig.a.session.serialize(rig.a.msg("kernel_info_request", {}))
        for _ in range(2):
            rig.a.socket.send_multipart(replayed)
            rig.answer(*rig.receive())
    refused = [r.getMessage() for r in caplog.records if "Refused" in r.getMessage()]
    assert len(refused) == 2
    assert "Invalid Signature" in refused[0] and "Duplicate Signature" in refused[1]

    first = rig.a.reply()  # the replayed request, answered once
    assert first["header"]["msg_type"] == "kernel_info_reply"
    last = rig.a.msg("kernel_info_request", {})
    rig.claim_and_answer(rig.a, last)
    assert parent_id(rig.a.reply()) == msg_id(last)  # no second answer came between
    # On IOPub: busy/idle for the one answered replay, then for the last request; nothing
    # for the refused ones.
    parents = [parent_id(rig.published()) for _ in range(4)]
    assert parents[:2] == [parent_id(first)] * 2 and parents[2:] == [msg_id(last)] * 2


# --- an idle kernel: the main shell's own control comm ---------------------------------------


def test_idle_control_comm_gets_our_answer_only_where_ipywidgets_accepted_it(rig: Rig) -> None:
    comm_open = rig.answers.wrap_comm_open(rig.manager.comm_open)
    rig.idle()

    def main_shell_opens(msg: dict[str, Any]) -> Any:
        claimed, idents, frames = rig.deliver(rig.a, msg)
        assert not claimed
        rig.main_shell_handles(idents, frames, comm_open)
        return rig.manager.comms.get(comm_id_of(msg))

    accepted = main_shell_opens(control_open(rig.a))
    assert isinstance(accepted._msg_callback, ControlCommAnswer)
    # Another major version: ipywidgets refuses and closes it; nothing to answer.
    assert main_shell_opens(control_open(rig.a, "2.0.0")) is None
    # Someone else's handler on the control target is theirs to answer.
    rig.manager.register_target(CONTROL_TARGET, lambda comm, msg: comm.on_msg(print))
    theirs = main_shell_opens(control_open(rig.a))
    assert theirs._msg_callback is print
