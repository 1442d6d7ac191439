"""End to end through a real jupyter_server: what a JupyterLab user's kernel traffic goes through.

The server is a subprocess (``python -m jupyter_server``) with token auth and
``--KernelManager.transport_encryption=required``; ``python3-ext`` is started through the
REST API, and every message travels over the kernel websocket with the
``v1.kernel.websocket.jupyter.org`` binary framing (see ``harness/kernel_websocket.py``).

The server's default IOPub rate limit stays on (1000 msg/s over 3 s, ``status``,
``comm_open`` and ``execute_input`` exempt): the tests see what a user would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.kernel_websocket import KernelWebsocket, stream_text
from harness.server import JupyterServer
from ipykernel_ext.client import is_own_echo

# Hang guard per test (default 120 s): a jupyter_server, a kernel and bursts through it.
pytestmark = pytest.mark.timeout(300)

EXT_KERNEL = "python3-ext"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
RATE_LIMIT_TEXT = "IOPub message rate exceeded"

BURST_CODE = """\
import ipywidgets as widgets
buttons = [widgets.Button(description=str(i)) for i in range({n})]
grid = widgets.GridBox(buttons, layout=widgets.Layout(grid_template_columns="repeat(25, 80px)"))
display(grid)
"""

# Every model the burst created: each Button with its ButtonStyle and Layout, the grid and
# its Layout. Printed by a second cell, so the burst cell is exactly what a user runs.
BURST_MODEL_IDS_CODE = """\
import json
_ids = [grid.model_id, grid.layout.model_id]
for _b in buttons:
    _ids += [_b.model_id, _b.style.model_id, _b.layout.model_id]
print(json.dumps(_ids))
"""


def printed_json(client: KernelWebsocket, code: str) -> Any:
    _, iopub = client.run(code)
    return json.loads(stream_text(iopub))


def model_refs(state: Any) -> set[str]:
    """Every ``IPY_MODEL_<id>`` reference inside a widget state (children, layout, style)."""
    return set(re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state)))


def test_kernel_runs_with_curve_and_ext_features(
    jupyter_server: JupyterServer, server_kernel: str, ws: KernelWebsocket
) -> None:
    info = jupyter_server.connection_info(server_kernel)
    assert info.get("curve_publickey") and info.get("curve_secretkey"), (
        "the server did not provision CurveZMQ keys: --KernelManager.transport_encryption "
        "was not applied"
    )
    assert jupyter_server.kernel_model(server_kernel)["name"] == EXT_KERNEL
    content = ws.kernel_info["content"]
    for feature in ("comm_echo", "widget_state", "iopub_stats"):
        assert feature in content["supported_features"]


@pytest.mark.parametrize("n_buttons", [1000, 3000])
def test_button_grid_burst_arrives_whole(ws: KernelWebsocket, n_buttons: int) -> None:
    msg_id = ws.execute(BURST_CODE.format(n=n_buttons))
    reply, iopub = ws.collect_execution(msg_id, timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]

    expected_ids = printed_json(ws, BURST_MODEL_IDS_CODE)
    assert len(expected_ids) == len(set(expected_ids)) == 3 * n_buttons + 2

    types = [m["msg_type"] for m in iopub]
    opens = [m for m in iopub if m["msg_type"] == "comm_open"]
    opened = {m["content"]["comm_id"] for m in opens}
    rate_limited = RATE_LIMIT_TEXT in stream_text(iopub, "stderr")
    summary = (
        f"{len(opens)}/{len(expected_ids)} comm_open, {types.count('display_data')} "
        f"display_data, rate limited: {rate_limited}"
    )
    assert not rate_limited, summary
    assert opened == set(expected_ids), summary
    assert len(opens) == len(expected_ids), summary  # and none twice

    # Every model a state refers to was opened (else: "Error displaying widget").
    for msg in opens:
        assert model_refs(msg["content"]["data"]["state"]) <= opened

    displays = [m for m in iopub if m["msg_type"] == "display_data"]
    assert len(displays) == 1, summary
    view = displays[0]["content"]["data"][WIDGET_VIEW_MIME]
    assert view["model_id"] == expected_ids[0]
    # The view comes after every model it needs.
    assert types.index("display_data") > max(i for i, t in enumerate(types) if t == "comm_open")
    assert types[0] == "status" and iopub[0]["content"]["execution_state"] == "busy"
    assert types[-1] == "status" and iopub[-1]["content"]["execution_state"] == "idle"
    # The kernel agrees: no message was ever re-sent lossy to a stalled subscriber.
    stats = ws.request("control", "iopub_stats_request")["content"]
    assert stats["status"] == "ok" and stats["missed"] == 0, stats


REGISTER_TARGET_CODE = """\
received = []
def _on_open(comm, open_msg):
    received.append(("open", open_msg["content"]["data"]))
    comm.on_msg(lambda msg: received.append(("msg", msg["content"]["data"])))
    comm.on_close(lambda msg: received.append(("close", msg["content"]["data"])))
get_ipython().kernel.comm_manager.register_target("e2e_target", _on_open)
"""


def test_comm_echo_reaches_second_websocket_client(
    jupyter_server: JupyterServer, server_kernel: str, ws: KernelWebsocket
) -> None:
    ws.run(REGISTER_TARGET_CODE)
    with KernelWebsocket(jupyter_server, server_kernel) as other:
        comm_id = "e2e0comm0" + other.session_id[:8]
        sent = [
            other.send(
                "shell",
                "comm_open",
                {"comm_id": comm_id, "target_name": "e2e_target", "data": {"hello": 1}},
                metadata={"from": "other"},
            ),
            other.send(
                "shell",
                "comm_msg",
                {"comm_id": comm_id, "data": {"n": 2}},
                buffers=[b"\x00\x01binary"],
            ),
            other.send("shell", "comm_close", {"comm_id": comm_id, "data": {"bye": 3}}),
        ]
        for msg in sent:
            parent_id = msg["header"]["msg_id"]

            def is_echo(m: dict[str, Any], pid: str = parent_id) -> bool:
                return m["msg_type"] == "comm_echo" and m["parent_header"].get("msg_id") == pid

            echo = ws.recv_until(is_echo, timeout=30)
            assert echo["channel"] == "iopub"
            assert echo["parent_header"]["session"] == other.session_id
            assert echo["parent_header"]["msg_type"] == msg["header"]["msg_type"]
            assert echo["content"] == msg["content"]
            assert echo["metadata"] == msg["metadata"]
            assert echo["buffers"] == msg["buffers"]
            assert not is_own_echo(echo, ws.session_id)

            # The sender sees it too and can tell it is its own.
            own = other.recv_until(is_echo, timeout=30)
            assert is_own_echo(own, other.session_id)

        # The handlers ran, after the echoes.
        received = printed_json(ws, "import json; print(json.dumps(received))")
        assert received == [["open", {"hello": 1}], ["msg", {"n": 2}], ["close", {"bye": 3}]]


def test_comm_echo_precedes_handler_output(
    jupyter_server: JupyterServer, server_kernel: str, ws: KernelWebsocket
) -> None:
    """An IntSlider update from one client: the other sees busy, comm_echo, echo_update, idle."""
    model_id = printed_json(
        ws,
        "import ipywidgets, json\nslider = ipywidgets.IntSlider()\n"
        "print(json.dumps(slider.model_id))",
    )
    with KernelWebsocket(jupyter_server, server_kernel) as other:
        update = other.send(
            "shell",
            "comm_msg",
            {
                "comm_id": model_id,
                "data": {"method": "update", "state": {"value": 42}, "buffer_paths": []},
            },
        )
        parent_id = update["header"]["msg_id"]
        seen: list[dict[str, Any]] = []
        while not (
            seen
            and seen[-1]["msg_type"] == "status"
            and seen[-1]["content"]["execution_state"] == "idle"
        ):
            seen.append(
                ws.recv_until(
                    lambda m: (
                        m["channel"] == "iopub" and m["parent_header"].get("msg_id") == parent_id
                    ),
                    timeout=30,
                )
            )
        types = [m["msg_type"] for m in seen]
        assert types[0] == "status" and types[1] == "comm_echo", types
        assert seen[1]["content"]["data"]["state"] == {"value": 42}
    assert printed_json(ws, "print(slider.value)") == 42


WIDGETS_CODE = """\
import ipywidgets, json
seven = ipywidgets.IntSlider(value=7, description="seven")
press = ipywidgets.Button(description="press")
print(json.dumps([seven.model_id, press.model_id]))
"""


def test_widget_state_request_answers_the_asker_with_each_models_state(
    jupyter_server: JupyterServer, server_kernel: str, ws: KernelWebsocket
) -> None:
    """``widget_state_request`` on the control channel, through the server's websocket."""
    slider_id, button_id = printed_json(ws, WIDGETS_CODE)
    with KernelWebsocket(jupyter_server, server_kernel) as other:
        reply = ws.request(
            "control",
            "widget_state_request",
            {"model_ids": [slider_id, button_id, "no-such-model"]},
            timeout=60,
        )
        everything = ws.request("control", "widget_state_request", {}, timeout=60)["content"]
        # Control requests are answered in order: a reply misrouted to the other client
        # would reach it before its own.
        other.request("control", "kernel_info_request", timeout=60)
        other_saw = [m["msg_type"] for m in other.backlog]

    # The models asked for.
    assert reply["msg_type"] == "widget_state_reply"
    content = reply["content"]
    assert content["status"] == "ok", content
    assert set(content["states"]) == {slider_id, button_id}, content
    assert content["missing"] == ["no-such-model"], content
    assert len(content["buffer_paths"]) == len(reply["buffers"]), "a buffer without its path"
    # Each widget's model and state.
    slider = content["states"][slider_id]
    assert slider["model_name"] == "IntSliderModel", slider
    assert slider["model_module"] == "@jupyter-widgets/controls", slider
    assert slider["model_module_version"], slider
    assert slider["state"]["value"] == 7, slider
    assert slider["state"]["description"] == "seven", slider
    button = content["states"][button_id]
    assert button["model_name"] == "ButtonModel", button
    assert button["state"]["description"] == "press", button
    # The Button's style and layout are referenced, and fetchable with {}.
    assert len(model_refs(button["state"])) == 2, button
    # Naming no model: every model.
    expected = {slider_id, button_id} | model_refs(button["state"])
    assert everything["status"] == "ok", everything
    assert expected <= set(everything["states"]), expected - set(everything["states"])
    assert everything["missing"] == [], everything["missing"]
    # To the requester only.
    assert "widget_state_reply" not in other_saw, other_saw


def test_queries_leave_the_server_state_busy(
    jupyter_server: JupyterServer, server_kernel: str, ws: KernelWebsocket, tmp_path: Path
) -> None:
    """A query answered mid-cell must not make the server report the kernel idle."""
    flag = tmp_path / "go"
    msg_id = ws.execute(
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)"
    )
    try:
        ws.recv_until(
            lambda m: (
                m["msg_type"] == "execute_input" and m["parent_header"].get("msg_id") == msg_id
            ),
            timeout=60,
        )
        assert jupyter_server.kernel_model(server_kernel)["execution_state"] == "busy"
        for query in ("widget_state_request", "iopub_stats_request"):
            reply = ws.request("control", query, timeout=60)
            assert reply["content"]["status"] == "ok", reply["content"]
        # A status published for a query would reach the server before the IOPub messages
        # of a later control request: wait for the idle of a kernel_info_request (a type the
        # server does not track) before reading the server's state again.
        barrier = ws.send("control", "kernel_info_request")["header"]["msg_id"]
        ws.recv_until(
            lambda m: (
                m["msg_type"] == "status"
                and m["parent_header"].get("msg_id") == barrier
                and m["content"]["execution_state"] == "idle"
            ),
            timeout=60,
        )
        assert jupyter_server.kernel_model(server_kernel)["execution_state"] == "busy"
    finally:
        flag.touch()
    reply, _ = ws.collect_execution(msg_id, timeout=60)
    assert reply["content"]["status"] == "ok"
