"""The merge rules (:mod:`ipykernel_ext.server.merging`) and the pacer's settings, in process.

Each case is a list of IOPub messages that wait for one tab, in order; the verdict is what
the line sends (how many messages, in which order) and what a page folding them ends with,
against the same page folding every message: the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from harness.cell_messages import clear, display, message, stream, widget_update
from harness.tab_view import TabView
from ipykernel_ext.server.merging import Line
from ipykernel_ext.server.paced_iopub import PacedIOPub

CELL = "cell-1"


def out(text: str, name: str = "stdout") -> dict[str, Any]:
    return stream(text, name, parent=CELL)


def update(comm: str, state: dict[str, Any], paths: Any = None, bufs: Any = None) -> Any:
    return widget_update(comm, state, paths, bufs, parent=CELL)


def custom(comm: str, i: int) -> dict[str, Any]:
    data = {"method": "custom", "content": {"i": i}}
    return message("comm_msg", {"comm_id": comm, "data": data}, CELL)


def through_line(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a tab gets when all of ``messages`` waited in one line."""
    line = Line()
    for m in messages:
        line.add(m, m, 100, True)
    sent = []
    while line:
        entry = line.pop()
        if entry.merged:
            merged = entry.message()
            sent.append({**merged, "msg_type": merged["header"]["msg_type"]})
        else:
            sent.append(entry.original)
    return sent


CASES: dict[str, tuple[list[dict[str, Any]], int]] = {
    # name: (messages, how many the tab gets)
    "consecutive prints join": ([out(f"{i}\n") for i in range(50)], 1),
    "stdout and stderr stay apart": ([out("a", n) for n in ("stdout", "stderr") * 5], 10),
    "a print crosses a widget update": ([out("a"), update("w", {"v": 1}), out("b")], 2),
    "a display between prints stays between": ([out("a"), display("d", parent=CELL), out("b")], 3),
    "a slider's updates become its last state": ([update("w", {"v": i}) for i in range(100)], 1),
    "two sliders interleaved": ([update(c, {"v": i}) for i in range(50) for c in ("a", "b")], 2),
    "a custom message is never merged": ([custom("c", i) for i in range(30)], 30),
    "an update does not cross a custom message": (
        [update("w", {"v": 1}), custom("w", 0), update("w", {"v": 2})],
        3,
    ),
    "an Output widget's msg_id update is a wall": (
        [update("o", {"msg_id": CELL}), out("in"), update("o", {"msg_id": ""}), out("after")],
        4,
    ),
    "a display's updates become its last": (
        [display(f"v{i}", "d", CELL, update=True) for i in range(40)],
        1,
    ),
    "an animation keeps its last frame": (
        [m for i in range(100) for m in (clear(parent=CELL), display(f"frame {i}", parent=CELL))],
        2,
    ),
    "a clear without wait still clears": (
        [display("x", parent=CELL), clear(False, CELL), out("a"), clear(parent=CELL), out("b")],
        3,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_tab_ends_as_it_would_with_every_message(name: str) -> None:
    messages, expected = CASES[name]
    sent = through_line(messages)
    assert len(sent) == expected
    every, merged = TabView(messages), TabView(sent)
    assert merged.outputs == every.outputs
    assert merged.widgets == every.widgets
    assert merged.custom == every.custom


def test_widget_buffers_follow_their_keys() -> None:
    messages = [
        update("img", {"format": "png"}, [["value"]], [b"old"]),
        update("img", {"width": "10"}, [["other"]], [b"keep"]),
        update("img", {}, [["value"]], [b"new"]),
    ]
    (sent,) = through_line(messages)
    data = sent["content"]["data"]
    assert data["state"] == {"format": "png", "width": "10"}
    assert sorted(zip(map(tuple, data["buffer_paths"]), sent["buffers"], strict=True)) == [
        (("other",), b"keep"),
        (("value",), b"new"),
    ]


def test_the_rate_settings_are_jupyter_servers_names_and_defaults() -> None:
    for name in (
        "limit_rate",
        "iopub_msg_rate_limit",
        "iopub_data_rate_limit",
        "rate_limit_window",
    ):
        ours = PacedIOPub.class_traits()[name]
        stock = ZMQChannelsWebsocketConnection.class_traits()[name]
        assert type(ours) is type(stock) and ours.default_value == stock.default_value, name
    assert "ZMQChannelsWebsocketConnection" in PacedIOPub.section_names()
