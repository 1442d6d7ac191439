"""comm_echo (PROTOCOL.md section 2): real kernels, CurveZMQ, two clients with their own Session.

Client A sends comm messages on shell; client B watches IOPub. Three kernels: the default one
(most tests, run in order and each restoring what it switched), one started with
``--no-comm-echo`` and one with an exclusion list in config.
"""

from __future__ import annotations

import ast
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.session import Session

from harness.cells import run_cell
from harness.kernels import new_client, start_kernel
from harness.messages import control_request
from ipykernel_ext.client import is_own_echo

# Hang guard per test (default 120 s): kernel starts plus waits of up to 60 s each.
pytestmark = pytest.mark.timeout(180)

#: Comm targets in the kernel: "echo_test" and "big_upload" print on open and close and
#: answer every comm_msg with a comm_msg carrying the data back and each buffer reversed.
SETUP = r"""
def _echo_test_target(comm, open_msg):
    print("opened", comm.comm_id)

    @comm.on_msg
    def _reply(msg):
        comm.send({"reply": msg["content"]["data"]},
                  buffers=[bytes(b)[::-1] for b in msg["buffers"]])

    @comm.on_close
    def _closed(msg):
        print("closed", comm.comm_id)

for _name in ("echo_test", "big_upload"):
    get_ipython().kernel.comm_manager.register_target(_name, _echo_test_target)
"""

BIG = os.urandom(100_000)  # above Session.copy_threshold (64 KiB): the zero-copy path


class Pair:
    """A kernel with client A (sends comm messages) and client B (watches IOPub)."""

    def __init__(self, km: KernelManager) -> None:
        self.km = km
        self.a = new_client(km)
        self.b = new_client(km)

    def close(self) -> None:
        self.a.stop_channels()
        self.b.stop_channels()
        self.km.shutdown_kernel(now=True)

    def run(self, code: str) -> str:
        """Run ``code`` from A; return its stdout (and result text). B is synced past it."""
        cell = run_cell(self.a, code)
        reply, messages = cell.reply, cell.messages
        assert reply is not None
        assert reply["content"]["status"] == "ok", reply["content"]
        self.sync_b()
        out = []
        for msg in messages:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "execute_result":
                out.append(msg["content"]["data"]["text/plain"])
        return "".join(out)

    def sync_b(self) -> list[dict[str, Any]]:
        """Everything B's IOPub delivers up to the idle of a fresh request of B's."""
        return read_until_idle(self.b, self.b.kernel_info(), keep_all=True)

    def features(self) -> list[str]:
        msg_id = self.b.kernel_info()
        reply = self.b.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.b.get_shell_msg(timeout=30)
        read_until_idle(self.b, msg_id)
        return reply["content"]["supported_features"]


def send_comm(
    kc: BlockingKernelClient,
    msg_type: str,
    content: Any,
    buffers: list[bytes] | None = None,
    metadata: Any = None,
) -> dict[str, Any]:
    """Send a comm message from ``kc`` as a frontend does; return the message sent."""
    msg = kc.session.msg(msg_type, content)
    if metadata is not None:
        msg["metadata"] = metadata
    msg["buffers"] = buffers or []
    kc.shell_channel.send(msg)
    return msg


def read_until_idle(
    kc: BlockingKernelClient, msg_id: str, keep_all: bool = False, timeout: float = 60
) -> list[dict[str, Any]]:
    """IOPub messages whose parent is ``msg_id`` (or all, with keep_all) up to its idle."""
    deadline = time.monotonic() + timeout
    messages = []
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        mine = msg["parent_header"].get("msg_id") == msg_id
        if mine or keep_all:
            messages.append(msg)
        if mine and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages


def types(messages: list[dict[str, Any]]) -> list[str]:
    """msg_types, status spelled status:busy / status:idle, runs of stream merged into one.

    (A print may come out as two stream messages if the IOPub thread's 0.2 s flush timer
    fires in the middle of it; that is not what these tests are about.)
    """
    kinds: list[str] = []
    for m in messages:
        kind = m["msg_type"]
        if kind == "status":
            kind = f"status:{m['content']['execution_state']}"
        if not (kind == "stream" and kinds and kinds[-1] == "stream"):
            kinds.append(kind)
    return kinds


def echoes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["msg_type"] == "comm_echo"]


def new_comm_id() -> str:
    return uuid.uuid4().hex


@contextmanager
def pair_of(extra_arguments: list[str] | None = None) -> Iterator[Pair]:
    pair = Pair(start_kernel(extra_arguments=extra_arguments))
    try:
        pair.run(SETUP)
        yield pair
    finally:
        pair.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with pair_of() as started:
        yield started


# --- what is echoed, and how ------------------------------------------------------------


def test_open_msg_close_echoed_to_other_client_in_order(pair: Pair) -> None:
    a, b = pair.a, pair.b
    comm_id = new_comm_id()
    small = [b"\x00\xff\x00binary", os.urandom(60_000)]  # 60 kB + 9 B: at most 64 KiB
    sent = [
        send_comm(
            a,
            "comm_open",
            {
                "comm_id": comm_id,
                "target_name": "echo_test",
                "target_module": None,
                "data": {"k": [1, 2.5, "x"]},
            },
            metadata={"tag": "open"},
        ),
        send_comm(
            a, "comm_msg", {"comm_id": comm_id, "data": {"n": 1, "s": "é"}}, small, {"tag": "m"}
        ),
        # Past comm_echo_max_buffer_bytes: the echo says so instead of carrying the buffers.
        send_comm(a, "comm_msg", {"comm_id": comm_id, "data": {"n": 2}}, [b"x", BIG], {"t": 1}),
        send_comm(a, "comm_close", {"comm_id": comm_id, "data": {}}),
    ]
    omitted = [None, None, {"buffers": 2, "bytes": 1 + len(BIG)}, None]
    handler_output = ["stream", "comm_msg", "comm_msg", "stream"]
    for msg, output, left_out in zip(sent, handler_output, omitted, strict=True):
        seen = read_until_idle(b, msg["header"]["msg_id"])
        assert types(seen) == ["status:busy", "comm_echo", output, "status:idle"]
        echo = seen[1]
        parent = echo["parent_header"]
        assert parent["msg_id"] == msg["header"]["msg_id"]
        assert parent["session"] == a.session.session
        assert parent["msg_type"] == msg["header"]["msg_type"]
        assert echo["content"] == msg["content"]
        echoed_buffers = [] if left_out else [bytes(buf) for buf in msg["buffers"]]
        assert [bytes(buf) for buf in echo["buffers"]] == echoed_buffers
        extra = {} if left_out is None else {"comm_echo_omitted": left_out}
        assert echo["metadata"] == {**msg["metadata"], **extra}
        assert echo["header"]["session"] != a.session.session  # published by the kernel
        assert not is_own_echo(echo, b.session.session)
        assert is_own_echo(echo, a.session.session)
    # The sender gets its own echoes too, and recognises them.
    for msg in sent:
        own = echoes(read_until_idle(a, msg["header"]["msg_id"]))
        assert len(own) == 1 and is_own_echo(own[0], a.session.session)


def test_open_to_unregistered_target_echoed_then_closed_by_kernel(pair: Pair) -> None:
    comm_id = new_comm_id()
    msg = send_comm(
        pair.a, "comm_open", {"comm_id": comm_id, "target_name": "no_such_target", "data": {}}
    )
    seen = [
        m for m in read_until_idle(pair.b, msg["header"]["msg_id"]) if m["msg_type"] != "stream"
    ]  # the comm manager logs the unknown target
    assert types(seen) == ["status:busy", "comm_echo", "comm_close", "status:idle"]
    assert seen[1]["content"]["target_name"] == "no_such_target"
    assert seen[2]["content"]["comm_id"] == comm_id


def test_unknown_comm_id_not_echoed(pair: Pair) -> None:
    for msg_type in ("comm_msg", "comm_close"):
        msg = send_comm(pair.a, msg_type, {"comm_id": "never-opened", "data": {}})
        seen = read_until_idle(pair.b, msg["header"]["msg_id"])
        assert echoes(seen) == [], msg_type
        assert types(seen)[0] == "status:busy"


def test_kernel_originated_comm_messages_not_echoed(pair: Pair) -> None:
    pair.sync_b()
    code = (
        "from comm import create_comm\n"
        "c = create_comm(target_name='frontend_side', data={'a': 1})\n"
        "c.send({'b': 2}, buffers=[b'xyz'])\n"
        "c.close()\n"
    )
    msg_id = pair.a.execute(code)
    seen = read_until_idle(pair.b, msg_id, keep_all=True)
    kinds = types(seen)
    assert {"comm_open", "comm_msg", "comm_close"} <= set(kinds)
    assert "comm_echo" not in kinds


def test_ipywidgets_slider_set_by_a_reaches_b(pair: Pair) -> None:
    model_id = ast.literal_eval(
        pair.run("import ipywidgets as w\nslider = w.IntSlider(value=1)\nslider.model_id")
    )
    update = {
        "comm_id": model_id,
        "data": {"method": "update", "state": {"value": 42}, "buffer_paths": []},
    }
    msg = send_comm(pair.a, "comm_msg", update)
    seen = read_until_idle(pair.b, msg["header"]["msg_id"])
    assert types(seen) == ["status:busy", "comm_echo", "comm_msg", "status:idle"]
    assert seen[1]["content"] == update
    # ipywidgets' own echo_update, unchanged, after ours.
    assert seen[2]["content"]["comm_id"] == model_id
    assert seen[2]["content"]["data"]["method"] == "echo_update"
    assert seen[2]["content"]["data"]["state"] == {"value": 42}
    assert pair.run("slider.value").strip() == "42"


def test_file_upload_echoed_without_the_file(pair: Pair) -> None:
    """As ipywidgets 8's FileUpload view sends a file (``set({value, error: ""})``, the
    ArrayBuffer at value.0.content): FileUpload's value says echo_update=False, so the echo
    carries neither the key nor the bytes."""
    model_id = ast.literal_eval(
        pair.run("import ipywidgets as w\nup = w.FileUpload()\nup.model_id")
    )
    data = os.urandom(1_000_000)
    entry = {"name": "f.bin", "type": "", "size": len(data), "last_modified": 1700000000000}
    state = {"value": [entry], "error": ""}
    update = {"method": "update", "state": state, "buffer_paths": [["value", 0, "content"]]}
    msg = send_comm(pair.a, "comm_msg", {"comm_id": model_id, "data": update}, [data])
    [echo] = echoes(read_until_idle(pair.b, msg["header"]["msg_id"]))
    trimmed = {"method": "update", "state": {"error": ""}, "buffer_paths": []}
    assert echo["content"] == {"comm_id": model_id, "data": trimmed}
    assert echo["buffers"] == []
    omitted = {"buffers": 1, "bytes": len(data), "state_keys": ["value"]}
    assert echo["metadata"] == {**msg["metadata"], "comm_echo_omitted": omitted}
    assert pair.run("len(up.value[0].content)") == str(len(data))


# --- bad input ----------------------------------------------------------------------------


def test_malformed_messages_not_echoed_and_shell_survives(pair: Pair) -> None:
    comm_id = new_comm_id()
    opened = send_comm(
        pair.a, "comm_open", {"comm_id": comm_id, "target_name": "echo_test", "data": {}}
    )
    assert len(echoes(read_until_idle(pair.b, opened["header"]["msg_id"]))) == 1
    cases: list[tuple[str, Any, Any]] = [
        ("comm_msg", {"data": {}}, None),  # no comm_id
        ("comm_msg", {"comm_id": 5, "data": {}}, None),
        ("comm_msg", {"comm_id": "", "data": {}}, None),
        ("comm_msg", {"comm_id": comm_id, "data": "not an object"}, None),
        ("comm_msg", {"comm_id": comm_id, "data": {}}, ["metadata", "as", "a", "list"]),
        ("comm_close", {"comm_id": ["unhashable"]}, None),
        ("comm_open", {"comm_id": new_comm_id(), "data": {}}, None),  # no target_name
        ("comm_open", {"comm_id": new_comm_id(), "target_name": 7, "data": {}}, None),
        (
            "comm_open",
            {"comm_id": new_comm_id(), "target_name": "echo_test", "target_module": 5, "data": {}},
            None,
        ),
        ("comm_msg", b"[1, 2]", None),  # content not an object, sent as packed JSON
        ("comm_msg", b"null", None),
        ("comm_close", b'"a string"', None),
    ]
    bad_ids = [send_comm(pair.a, t, c, metadata=m)["header"]["msg_id"] for t, c, m in cases]
    # Stock ipykernel's shell-channel thread drops a comm_msg/comm_close whose content is not
    # an object (or whose comm_id is unhashable) without any status, so there is no idle to
    # wait for per message: read everything up to the idle of a request sent after them all.
    check = pair.a.execute("print(6 * 7)")
    seen = read_until_idle(pair.b, check, keep_all=True)
    assert echoes(seen) == []
    # The shell still answers (in order: the malformed ones were all processed or dropped).
    # Joined: `print` writes the value and the newline apart, and a loaded kernel's flush can
    # fall between them, sending two stream messages.
    assert (
        "".join(
            m["content"]["text"]
            for m in seen
            if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == check
        )
        == "42\n"
    )
    handled = {m["parent_header"].get("msg_id") for m in seen} & set(bad_ids)
    assert handled, "none of the malformed messages reached the comm handlers"
    # The comm opened before still echoes and replies.
    ok = send_comm(pair.a, "comm_msg", {"comm_id": comm_id, "data": {"ok": True}})
    assert types(read_until_idle(pair.b, ok["header"]["msg_id"])) == [
        "status:busy",
        "comm_echo",
        "comm_msg",
        "status:idle",
    ]


def test_unsigned_wrongly_signed_or_replayed_message_reaches_nothing(pair: Pair) -> None:
    a, b = pair.a, pair.b
    pair.sync_b()
    socket = a.shell_channel.socket
    forged: list[str] = []
    for key in (b"not-the-kernel-key", b""):  # b"": no HMAC at all (unsigned)
        rogue = Session(key=key)
        msg = rogue.msg(
            "comm_open",
            {"comm_id": f"forged-{len(forged)}", "target_name": "echo_test", "data": {}},
        )
        rogue.send(socket, msg)
        forged.append(msg["header"]["msg_id"])
    # A well-signed comm_open, then the same frames again: the replay must be dropped.
    replayed_id = new_comm_id()
    good = a.session.msg(
        "comm_open", {"comm_id": replayed_id, "target_name": "echo_test", "data": {}}
    )
    frames = a.session.serialize(good)
    socket.send_multipart(frames)
    socket.send_multipart(frames)

    check = a.execute(
        "print(sorted(k for k in get_ipython().kernel.comm_manager.comms"
        " if k.startswith('forged')))"
    )
    seen = read_until_idle(b, check, keep_all=True)
    parents = [m["parent_header"].get("msg_id") for m in seen]
    assert not set(forged) & set(parents)
    echoed = echoes(seen)
    assert [e["content"]["comm_id"] for e in echoed] == [replayed_id]  # once, not twice
    assert parents.count(good["header"]["msg_id"]) == 4  # busy, echo, stream, idle: once
    out = "".join(
        m["content"]["text"]
        for m in seen
        if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == check
    )
    assert out.strip() == "[]"  # the kernel opened none of the forged comms


# --- switches -----------------------------------------------------------------------------


def _open_msg_close(pair: Pair, target: str = "echo_test") -> list[list[dict[str, Any]]]:
    """A opens, messages and closes a comm; what B saw for each of the three."""
    comm_id = new_comm_id()
    seen = []
    for msg_type, content in (
        ("comm_open", {"comm_id": comm_id, "target_name": target, "data": {}}),
        ("comm_msg", {"comm_id": comm_id, "data": {"x": 1}}),
        ("comm_close", {"comm_id": comm_id, "data": {}}),
    ):
        msg = send_comm(pair.a, msg_type, content)
        seen.append(read_until_idle(pair.b, msg["header"]["msg_id"]))
    return seen


def test_runtime_switch_off_and_on(pair: Pair) -> None:
    try:
        pair.run("get_ipython().kernel.echo_enabled = False")
        assert "comm_echo" not in pair.features()
        seen = _open_msg_close(pair)
        assert [types(s) for s in seen] == [
            ["status:busy", "stream", "status:idle"],
            ["status:busy", "comm_msg", "status:idle"],  # the handler still runs
            ["status:busy", "stream", "status:idle"],
        ]
        pair.run("get_ipython().kernel.echo_enabled = True")
        assert pair.features().count("comm_echo") == 1
        assert [len(echoes(s)) for s in _open_msg_close(pair)] == [1, 1, 1]
    finally:
        pair.run("get_ipython().kernel.echo_enabled = True")
    assert pair.features().count("comm_echo") == 1


def test_switch_leaves_the_comm_manager_untouched(pair: Pair) -> None:
    """The switch lives on the kernel: the comm package's CommManager gets no trait added."""
    manager = "get_ipython().kernel.comm_manager"
    printed = pair.run(f"print(type({manager}).__module__, {manager}.has_trait('echo_enabled'))")
    assert printed == "ipykernel.comm.manager False\n"


def test_no_comm_echo_flag() -> None:
    with pair_of(["--no-comm-echo"]) as pair:
        assert "comm_echo" not in pair.features()
        assert [len(echoes(s)) for s in _open_msg_close(pair)] == [0, 0, 0]
        assert pair.run("get_ipython().kernel.echo_enabled").strip() == "False"
        pair.run("get_ipython().kernel.echo_enabled = True")
        assert "comm_echo" in pair.features()
        assert [len(echoes(s)) for s in _open_msg_close(pair)] == [1, 1, 1]


def test_exclude_targets_config_and_runtime() -> None:
    with pair_of(["--ExtKernel.comm_echo_exclude_targets=big_upload"]) as pair:
        assert "comm_echo" in pair.features()  # echo is on; only one target is left out
        assert [len(echoes(s)) for s in _open_msg_close(pair, "big_upload")] == [0, 0, 0]
        assert [len(echoes(s)) for s in _open_msg_close(pair, "echo_test")] == [1, 1, 1]
        # An exclusion applies to comms already open: a big_upload comm opened while
        # excluded is echoed once the list no longer names it, and the reverse.
        comm_id = new_comm_id()
        opened = send_comm(
            pair.a, "comm_open", {"comm_id": comm_id, "target_name": "big_upload", "data": {}}
        )
        assert echoes(read_until_idle(pair.b, opened["header"]["msg_id"])) == []
        pair.run("get_ipython().kernel.comm_echo_exclude_targets = ['echo_test']")
        msg = send_comm(pair.a, "comm_msg", {"comm_id": comm_id, "data": {}})
        assert len(echoes(read_until_idle(pair.b, msg["header"]["msg_id"]))) == 1
        assert [len(echoes(s)) for s in _open_msg_close(pair, "echo_test")] == [0, 0, 0]


# --- other dispatch paths -------------------------------------------------------------------

WAITER_SETUP = r"""
_received = {}

def _waiter_target(comm, open_msg):
    @comm.on_msg
    def _got(msg):
        _received[comm.comm_id] = msg["content"]["data"]
        comm.send({"ack": True})

get_ipython().kernel.comm_manager.register_target("waiter", _waiter_target)
"""


def test_echo_while_an_async_cell_waits_for_the_frontend(pair: Pair) -> None:
    """A comm message handled while an async cell awaits (a cell awaiting a widget's answer)
    gets its own busy and idle, as at rest (PROTOCOL.md section 7; stock publishes none): the
    echo comes right after the busy, before the handler's output."""
    pair.run(WAITER_SETUP)
    comm_id = new_comm_id()
    opened = send_comm(pair.a, "comm_open", {"comm_id": comm_id, "target_name": "waiter"})
    read_until_idle(pair.b, opened["header"]["msg_id"])
    cell = pair.a.execute(
        "import asyncio\n"
        f"for _ in range(6000):\n    if {comm_id!r} in _received: break\n"
        "    await asyncio.sleep(0.01)\n"
        f"print('got', _received[{comm_id!r}])"
    )
    # Send only once the cell runs (it holds the shell lock until the comm_msg arrives).
    while True:
        msg = pair.b.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") == cell and msg["msg_type"] == "execute_input":
            break
    sent = send_comm(pair.a, "comm_msg", {"comm_id": comm_id, "data": {"answer": 42}})
    seen = read_until_idle(pair.b, cell, keep_all=True)
    of_comm = [m for m in seen if m["parent_header"].get("msg_id") == sent["header"]["msg_id"]]
    assert types(of_comm) == ["status:busy", "comm_echo", "comm_msg", "status:idle"]
    assert of_comm[1]["content"]["data"] == {"answer": 42}
    out = "".join(m["content"]["text"] for m in seen if m["msg_type"] == "stream")
    assert "got {'answer': 42}" in out


def test_echo_from_a_subshell(pair: Pair) -> None:
    reply = control_request(pair.a, "create_subshell_request")
    assert reply["content"]["status"] == "ok", reply["content"]
    subshell_id = reply["content"]["subshell_id"]
    try:
        msg = pair.a.session.msg(
            "comm_open", {"comm_id": new_comm_id(), "target_name": "echo_test", "data": {}}
        )
        msg["header"]["subshell_id"] = subshell_id
        pair.a.shell_channel.send(msg)
        seen = read_until_idle(pair.b, msg["header"]["msg_id"])
        assert types(seen) == ["status:busy", "comm_echo", "stream", "status:idle"]
        assert seen[1]["parent_header"]["subshell_id"] == subshell_id
    finally:
        control_request(pair.a, "delete_subshell_request", {"subshell_id": subshell_id})
