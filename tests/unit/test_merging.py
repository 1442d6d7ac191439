"""The merge rules (``ipykernel_ext.server.websocket.merging``) and the pacer's settings.

Each case is a list of IOPub messages that wait for one tab, in order; the verdict is what
the line sends (how many messages, in which order) and what a page folding them ends with,
against the same page folding every message: the same.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from harness.cell_messages import clear, display, message, stream, widget_update
from harness.tab_view import TabView, sees_every_change, write_order_kept
from ipykernel_ext.server.websocket import MAX_COUNTED_CELLS, Line, PacedIOPub

CELL = "cell-1"


def out(text: str, name: str = "stdout") -> dict[str, Any]:
    return stream(text, name, parent=CELL)


def update(
    comm: str, state: dict[str, Any], paths: Any = None, bufs: Any = None, method: str = "update"
) -> Any:
    return widget_update(comm, state, paths, bufs, parent=CELL, method=method)


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
    assert not sees_every_change(every, merged)
    assert not write_order_kept(every, merged)


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


def test_widget_updates_keep_last_writer_order_across_models() -> None:
    """``A=1, B=5, A=2``: a frontend link (``jslink``) between A and B ends on 2 with every
    message, so the merged update takes the later message's place (on the old main it kept the
    first one's: ``A=2, B=5``, and the linked page ended on 5)."""
    sent = through_line([update("a", {"v": 1}), update("b", {"v": 5}), update("a", {"v": 2})])
    assert [(m["content"]["comm_id"], m["content"]["data"]["state"]) for m in sent] == [
        ("b", {"v": 5}),
        ("a", {"v": 2}),
    ]


def test_an_output_widgets_outputs_update_is_a_wall() -> None:
    """``out.append_stdout`` sets the Output widget's ``outputs``, beside what ``with out:``
    captured: neither may cross the other (on the old main the update crossed the captured
    print, and the widget lost it)."""
    messages = [
        out("captured 1\n"),
        update("o", {"outputs": [{"output_type": "stream", "text": "appended"}]}),
        out("captured 2\n"),
        update("o", {"outputs": []}),
    ]
    assert through_line(messages) == messages


def test_a_display_with_an_id_is_never_skipped_with_a_frame() -> None:
    """A ``display_data`` with a ``display_id`` updates every display of that id on the page:
    an animation frame holding one is sent whole (on the old main it was skipped)."""
    frames = [
        m
        for i in range(3)
        for m in (clear(parent=CELL), display(f"frame {i}", "shared", parent=CELL))
    ]
    assert through_line(frames) == frames


def test_the_merge_count_keeps_only_recent_cells() -> None:
    """A cell that never gets an ``idle`` does not keep its count for ever (on the old main
    ``Line.folded`` grew by one entry per such cell)."""
    line = Line()
    for cell in range(10 * MAX_COUNTED_CELLS):
        for i in range(2):
            m = stream(f"{i}", parent=f"cell-{cell}")
            line.add(m, m, 10, True)
        line.pop()
    assert len(line.folded) == MAX_COUNTED_CELLS
    assert line.folded_total == 10 * MAX_COUNTED_CELLS


def random_cell(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` IOPub messages of one cell, drawn from every kind the rules read: widget state of
    either method, with values that come back (pulses) and commands set then reset."""
    method = lambda: rng.choice(["update", "update", "echo_update"])  # noqa: E731
    make = [
        lambda: out(f"o{rng.randrange(9)}\n" if rng.random() < 0.7 else f"\r{rng.randrange(9)}"),
        lambda: out(f"e{rng.randrange(9)}\n", "stderr"),
        lambda: update(rng.choice("abc"), {rng.choice("xyz"): rng.randrange(4)}, method=method()),
        lambda: update("o", {"outputs": [rng.randrange(9)]}),
        lambda: display(f"u{rng.randrange(99)}", rng.choice(["d1", "d2"]), CELL, update=True),
        lambda: display(f"v{rng.randrange(99)}", rng.choice([None, None, "d1"]), CELL),
        lambda: clear(rng.random() < 0.8, CELL),
        lambda: custom(rng.choice("ab"), rng.randrange(99)),
        lambda: update(rng.choice("ab"), {"cmd": rng.choice([None, rng.randrange(3)])}),
        lambda: update(rng.choice("ab"), {"cmd": None}, [["cmd"]], [bytes([rng.randrange(2)])]),
    ]
    weights = [6, 1, 6, 1, 3, 3, 3, 1, 3, 1]
    return [rng.choices(make, weights)[0]() for _ in range(n)]


@pytest.mark.parametrize("seed", range(300))
def test_any_mix_ends_as_every_message_would(seed: int) -> None:
    """Random cells of every kind: the tab ends on the outputs, widget states and custom
    messages that every message gives, its widgets change as the page acts on them (every
    command and pulse seen, in order: on main, 203 of these 300 seeds lost one), any two
    models' keys end last written in the same order (a frontend link between them ends the
    same; on main 166 of the 300 did not), and it never gets more messages than were sent."""
    messages = random_cell(random.Random(seed), 80)
    sent = through_line(messages)
    assert len(sent) <= len(messages)
    every, merged = TabView(messages), TabView(sent)
    assert merged.outputs == every.outputs
    assert merged.widgets == every.widgets
    assert merged.custom == every.custom
    assert not sees_every_change(every, merged)
    assert not write_order_kept(every, merged)


@pytest.mark.parametrize("seed", range(100))
def test_any_mix_read_as_it_comes_keeps_every_command(seed: int) -> None:
    """The same random cells, the tab taking the first waiting entry now and then while the
    cell runs: it ends on every message's outputs and widget states, sees every command (a
    value then reset to ``None``; a pulse back to a value already sent is not promised, the
    line no longer holds it), and two models' keys end written in full delivery's order (on
    main 83 of these 100 seeds failed)."""
    rng = random.Random(seed)
    messages = random_cell(rng, 80)
    line, sent = Line(), []

    def take() -> None:
        entry = line.pop()
        if entry.merged:
            merged = entry.message()
            sent.append({**merged, "msg_type": merged["header"]["msg_type"]})
        else:
            sent.append(entry.original)

    for m in messages:
        line.add(m, m, 100, True)
        if rng.random() < 0.2:
            take()
    while line:
        take()
    every, merged = TabView(messages), TabView(sent)
    assert merged.outputs == every.outputs
    assert merged.widgets == every.widgets
    assert not sees_every_change(every, merged, pulses=False)
    assert not write_order_kept(every, merged)
