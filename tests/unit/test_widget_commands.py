"""Widget state merging as the page acts on it (issues 54, 50.4, 50.5), through the real
:class:`~ipykernel_ext.server.websocket.Line`.

A page acts on every *change* of a widget key, not only on its final state: a command trait
set then reset at once (plotly's ``FigureWidget``: ``{_py2js_restyle: msg}`` then
``{_py2js_restyle: None}``) must reach it in full, while a value trait (a slider) still folds.
``update`` and ``echo_update`` of one model fold where the page would end the same, and no
merged update moves a write across another model's. Each verdict compares what a tab gets
with every message, through :class:`harness.tab_view.TabView`'s change events.
"""

from __future__ import annotations

from typing import Any

from harness.cell_messages import widget_update
from harness.tab_view import NONE, TabView, sees_every_change
from ipykernel_ext.server.websocket import Line
from tests.unit.test_merging import CELL, through_line

CMD = "_py2js_restyle"


def update(comm: str, state: dict[str, Any], paths: Any = None, bufs: Any = None) -> Any:
    return widget_update(comm, state, paths, bufs, parent=CELL)


def restyle(i: int) -> dict[str, Any]:
    """A restyle as plotly sends it (the edit id makes each one differ, as plotly's does)."""
    return {"restyle_data": {"y": [[i, i + 1]]}, "restyle_traces": [0], "trace_edit_id": i}


def commands(view: TabView, comm: str = "fig", key: str = CMD) -> list[str]:
    """The values the page's change events saw for ``key`` that were not ``None``."""
    return [v for v in view.changes.get((comm, key), []) if v != NONE]


def check(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the tab gets when ``messages`` all wait, checked against every message: the same
    final states and every change the page acts on."""
    sent = through_line(messages)
    every, merged = TabView(messages), TabView(sent)
    assert merged.widgets == every.widgets
    assert not sees_every_change(every, merged)
    return sent


def test_a_command_set_then_reset_reaches_the_page() -> None:
    """``{cmd: msg}`` then ``{cmd: None}``: the page sees the command, then the reset (on
    main they folded into ``{cmd: None}`` and the page never saw the restyle)."""
    sent = check([update("fig", {CMD: restyle(1)}), update("fig", {CMD: None})])
    assert [m["content"]["data"]["state"][CMD] for m in sent] == [restyle(1), None]


def test_several_commands_in_a_row_each_reach_the_page_in_order() -> None:
    """A loop of 500 restyles, each set and reset, and 500 equal commands (the same value
    each time: the reset between them is what makes each a change the page acts on): every
    one reaches the page, in order (on main: none did)."""
    loop = [
        m
        for i in range(500)
        for m in (update("fig", {CMD: restyle(i)}), update("fig", {CMD: None}))
    ]
    sent = check(loop)
    assert len(commands(TabView(sent))) == 500
    same = [
        m
        for _ in range(500)
        for m in (update("fig", {CMD: {"zoom": 2}}), update("fig", {CMD: None}))
    ]
    assert through_line(same) == same


def test_a_command_beside_value_keys_of_the_same_model() -> None:
    """plotly's figure holds value traits beside its commands (``_last_trace_edit_id``): they
    fold with the commands, every command reaches the page, and the page ends on the last
    value (on main the commands were lost)."""
    loop = [
        m
        for i in range(500)
        for m in (
            update("fig", {CMD: restyle(i)}),
            update("fig", {"_last_trace_edit_id": i}),
            update("fig", {CMD: None}),
        )
    ]
    sent = check(loop)
    assert len(commands(TabView(sent))) == 500
    assert len(sent) <= 1000 < len(loop)  # the value key folds into the commands' messages


def test_a_slider_still_folds() -> None:
    """A value trait set 20000 times is one message (as on main)."""
    assert len(check([update("s", {"value": i}) for i in range(20000)])) == 1


def test_buffers_under_a_command_key_reach_the_page() -> None:
    """A command whose data is binary (numpy arrays in a restyle: buffers under
    ``[CMD, "restyle_data", ...]``), or all binary (absent from ``state``), then reset: each
    reaches the page with its own bytes (on main the reset folded them away)."""
    loop = []
    for i in range(50):
        partly = update("fig", {CMD: {"restyle_traces": [0]}}, [[CMD, "y"]], [bytes([i])])
        wholly = update("fig", {}, [[CMD]], [bytes([i, i])])
        loop += [partly, update("fig", {CMD: None}), wholly, update("fig", {CMD: None})]
    sent = check(loop)
    assert len(commands(TabView(sent))) == 100
    assert sent == loop  # nothing to fold: each command is reset at once


def test_update_and_echo_update_of_one_model_fold() -> None:
    """A slider dragged 60 times a second for 10 minutes, its kernel observer setting another
    key each time (``echo_update {value}`` and ``update {description}``, alternating), behind
    a tab that reads nothing: at most 2 entries wait, not 72000 as on main (entries keyed by
    method never folded across each other), and the page ends as with every message."""
    line, messages = Line(), []
    for i in range(60 * 600):
        echo = widget_update("s", {"value": i % 1000}, parent=f"drag-{i}", method="echo_update")
        observer = widget_update("s", {"description": f"{i}"}, parent=f"drag-{i}")
        for m in (echo, observer):
            line.add(m, m, 100, True)
            messages.append(m)
        assert len(line) <= 2
    assert len(check(messages)) == 2


def test_update_and_echo_update_of_one_key_keep_their_order() -> None:
    """An ``update`` and an ``echo_update`` that set the same key do not cross: the page
    filters an ``echo_update`` by its parent and applies an ``update`` always, so their order
    is what the originating page ends with."""
    messages = [
        widget_update("s", {"value": 1}, parent="drag-1", method="echo_update"),
        update("s", {"value": 2}),
        widget_update("s", {"value": 3}, parent="drag-2", method="echo_update"),
    ]
    assert through_line(messages) == messages


def linked(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A page where ``a.value`` and ``b.value`` are linked in the frontend (``jslink``):
    each change of one sets the other. Their values once every message is applied."""
    values: dict[str, Any] = {}
    for m in messages:
        state = m["content"]["data"]["state"]
        if "value" in state:
            values["a"] = values["b"] = state["value"]
    return values


def test_a_merged_update_does_not_move_a_write_across_another_model() -> None:
    """``A{value:1}, B{value:5}, A{max:10}``: with a ``jslink`` between A and B, every message
    ends on A=5, B=5. The later A update does not set A's ``value`` again, so it is not
    folded across B (on main the tab got ``B{value:5}, A{value:1, max:10}`` and ended on 1)."""
    messages = [update("a", {"value": 1}), update("b", {"value": 5}), update("a", {"max": 10})]
    sent = check(messages)
    assert linked(sent) == linked(messages) == {"a": 5, "b": 5}
    assert sent == messages


def test_a_merged_update_moves_where_it_sets_every_key_again() -> None:
    """``A{value:1}, B{value:5}, A{value:2, max:10}``: the later A update sets A's value
    again, so the merged one may take its place (the linked page ends on 2 either way)."""
    messages = [
        update("a", {"value": 1}),
        update("b", {"value": 5}),
        update("a", {"value": 2, "max": 10}),
    ]
    sent = check(messages)
    assert len(sent) == 2
    assert linked(sent) == linked(messages) == {"a": 2, "b": 2}
