"""widgets/snapshot.py in process: request parsing, the buffer split, the fail-safe slow path,
and one reader shared by the threads that take snapshots at once.

Widgets are made in this process (without a kernel their comms send nothing); the reference
for every state is what ipywidgets' ``update_states`` builds: ``get_state()`` per widget,
then ipywidgets' own ``_remove_buffers`` over the whole dict.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ipykernel_ext.kernel.widgets import reader as widget_reader
from ipykernel_ext.kernel.widgets import snapshot as widget_state
from ipykernel_ext.kernel.widgets.buffers import split_buffers
from ipykernel_ext.kernel.widgets.snapshot import (
    WidgetStateRequestError,
    build_widget_state_reply,
    parse_request,
)

w = pytest.importorskip("ipywidgets")
from ipywidgets import DOMWidget, Widget  # noqa: E402
from ipywidgets.widgets.widget import _remove_buffers  # noqa: E402
from traitlets import Bytes, Int, List, Unicode  # noqa: E402

# --- request parsing ------------------------------------------------------------------------


def test_parse_request_every_model_or_some_in_order_once() -> None:
    assert parse_request({}) is None
    assert parse_request({"model_ids": []}) == []
    assert parse_request({"model_ids": ["b", "a", "b", "c", "a"]}) == ["b", "a", "c"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([], "must be an object, not list"),
        (None, "must be an object, not NoneType"),
        ({"model_ids": "abc"}, "list of strings"),
        ({"model_ids": ["a", 1]}, "list of strings"),
        ({"model_ids": None}, "list of strings"),
        ({"model_ids": [], "extra": 1}, "unknown fields ['extra']"),
        ({1: "x"}, "unknown fields ['1']"),
        ({"unknown": 1}, "unknown fields ['unknown']"),
    ],
)
def test_parse_request_refuses_malformed(content: Any, message: str) -> None:
    with pytest.raises(WidgetStateRequestError) as caught:
        parse_request(content)
    assert message in str(caught.value)


# --- the buffer split against ipywidgets' ---------------------------------------------------

BUFFER = b"\x00\x01\x02"

STATES = [
    {"plain": 1, "text": "a", "none": None, "flag": True, "x": 1.5},
    {"top": BUFFER, "ba": bytearray(b"xy"), "mv": memoryview(b"mv")},
    {"items": [1, BUFFER, "a", {"deep": BUFFER, "n": None}]},
    {"nested": {"a": {"b": memoryview(b"q")}, "c": [1, 2]}, "empty": {}, "list": []},
    {"tuple": (BUFFER, "a", (1, bytearray(b"t")))},
    {"int_keys": {1: BUFFER, 2: "two"}},
    {"no_buffers": {"a": [1, [2, [3]]]}},
]


def _wire(value: Any) -> Any:
    """What a JSON packer makes of ``value`` (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("state", STATES, ids=range(len(STATES)))
def test_split_buffers_matches_remove_buffers(state: dict[str, Any]) -> None:
    theirs, their_paths, their_buffers = _remove_buffers(state)
    paths: list[list[Any]] = []
    buffers: list[Any] = []
    ours = split_buffers(state, [], paths, buffers)
    assert _wire(ours) == _wire(theirs)
    assert paths == their_paths
    assert [bytes(b) for b in buffers] == [bytes(b) for b in their_buffers]


def test_split_buffers_never_mutates_its_input() -> None:
    inner = {"deep": BUFFER}
    items = [BUFFER, inner]
    state = {"items": items, "top": BUFFER}
    split_buffers(state, [], [], [])
    assert state == {"items": [BUFFER, {"deep": BUFFER}], "top": BUFFER}
    assert state["items"] is items and items[1] is inner


# --- the fast path and the fail-safe slow path ----------------------------------------------


class Custom(DOMWidget):  # type: ignore[misc]  # ipywidgets ships no types: its classes are Any
    _model_name = Unicode("CustomModel").tag(sync=True)
    count = Int(3).tag(sync=True)
    data = Bytes(b"payload").tag(sync=True)
    parts = List([b"in-list", 1]).tag(sync=True)


class BrokenPlan:
    """A class plan whose entries cannot be read: an ipywidgets or traitlets change the fast
    path does not expect (the plan reads their internals); ``get_state`` is untouched."""

    overridden = False
    per_instance: frozenset[str] = frozenset()
    meta_direct = False

    def __init__(self, keys: list[str]) -> None:
        self.keys = list(keys)

    @property
    def entries(self) -> Any:
        raise KeyError("an internal moved")


class GetStateFails(Widget):  # type: ignore[misc]  # ipywidgets ships no types: its classes are Any
    value = Int(1).tag(sync=True)
    refuse = False

    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        if self.refuse:
            raise ValueError("get_state refuses")
        return super().get_state(key, drop_defaults)


@pytest.fixture
def widgets() -> Iterator[list[Any]]:
    made = [
        w.Button(description="b"),
        w.Image(value=b"\x89PNG fake", format="png"),
        w.IntSlider(value=4),
        Custom(),
        Custom(count=5),
    ]
    yield made
    for widget in made:
        widget.close()


@pytest.fixture
def fresh_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader with no plans and no warnings yet (it is kept per process)."""
    monkeypatch.setattr(widget_state, "_current_reader", widget_state._CurrentReader())


def update_states(model_ids: list[str]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """What ipywidgets' own control comm would send for these models."""
    instances = w.widgets.widget._instances
    full = {
        model_id: {
            "model_name": instances[model_id]._model_name,
            "model_module": instances[model_id]._model_module,
            "model_module_version": instances[model_id]._model_module_version,
            "state": instances[model_id].get_state(drop_defaults=False),
        }
        for model_id in model_ids
    }
    return _remove_buffers(full)


def ids_of(widgets: list[Any]) -> list[str]:
    return [widget.model_id for widget in widgets]


def assert_same_as_update_states(
    content: dict[str, Any], buffers: list[Any], ids: list[str]
) -> None:
    states, paths, their_buffers = update_states(ids)
    assert content["errors"] == {} and content["missing"] == []
    assert list(content["states"]) == ids
    assert _wire(content["states"]) == _wire(states)
    assert content["buffer_paths"] == paths
    assert [bytes(b) for b in buffers] == [bytes(b) for b in their_buffers]


def test_fast_path_failure_falls_back_to_the_same_state(
    widgets: list[Any], fresh_reader: None, caplog: pytest.LogCaptureFixture
) -> None:
    ids = ids_of(widgets)
    reader = widget_state._current_reader.get()
    assert reader is not None
    reader.plans[Custom] = BrokenPlan(widgets[3].keys)  # type: ignore[assignment]  # a stand-in plan
    with caplog.at_level(logging.WARNING, logger=widget_state.__name__):
        content, buffers = build_widget_state_reply({"model_ids": ids})
    assert_same_as_update_states(content, buffers, ids)
    assert content["states"][widgets[4].model_id]["state"]["count"] == 5
    assert [widgets[3].model_id, "state", "data"] in content["buffer_paths"]
    assert [widgets[3].model_id, "state", "parts", 0] in content["buffer_paths"]

    # Logged once for the class, although two of its widgets (and two requests) failed.
    build_widget_state_reply({"model_ids": ids})
    warnings = [r for r in caplog.records if "fast read" in r.getMessage()]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "Custom" in message and "KeyError: 'an internal moved'" in message


def test_every_widget_through_the_slow_path_is_the_same(
    widgets: list[Any], fresh_reader: None
) -> None:
    """Force the slow path for every widget: the reply is what the fast path gives."""
    ids = ids_of(widgets)
    fast, fast_buffers = build_widget_state_reply({"model_ids": ids})
    reader = widget_state._current_reader.get()
    assert reader is not None

    def broken(
        model_id: str, widget: Any, buffer_paths: list[list[Any]], buffers: list[Any]
    ) -> dict[str, Any] | None:
        raise KeyError("an internal moved")

    reader.read_one = broken  # type: ignore[method-assign]  # every fast read fails
    slow, slow_buffers = build_widget_state_reply({"model_ids": ids})
    assert_same_as_update_states(slow, slow_buffers, ids)
    assert _wire(slow) == _wire(fast)
    assert [bytes(b) for b in slow_buffers] == [bytes(b) for b in fast_buffers]


def test_only_a_failing_get_state_is_an_error(
    widgets: list[Any], fresh_reader: None, caplog: pytest.LogCaptureFixture
) -> None:
    broken = GetStateFails()
    broken.refuse = True
    try:
        ids = [broken.model_id, widgets[0].model_id]
        with caplog.at_level(logging.WARNING, logger=widget_state.__name__):
            content, _ = build_widget_state_reply({"model_ids": ids})
        assert content["errors"] == {
            broken.model_id: {"ename": "ValueError", "evalue": "get_state refuses"}
        }
        assert content["missing"] == [broken.model_id]
        assert list(content["states"]) == [widgets[0].model_id]
        # The widget's own failure is not the fast path's: no warning about the fast path.
        assert not [r for r in caplog.records if "fast read" in r.getMessage()]
    finally:
        broken.refuse = False
        broken.close()


def test_a_closed_widget_is_missing_on_the_slow_path_too(
    widgets: list[Any], fresh_reader: None
) -> None:
    reader = widget_state._current_reader.get()
    assert reader is not None
    target = widgets[3]
    model_id = target.model_id
    errors: dict[str, Any] = {}
    target.close()
    assert reader.read_slowly(model_id, target, [], [], errors) is None
    assert errors == {}


# --- one reader, several threads -------------------------------------------------------------

THREADS = 6


def run_together(work: Callable[[int], None]) -> None:
    """``work(n)`` on THREADS real threads, started together at a barrier; re-raises a failure."""
    barrier = threading.Barrier(THREADS, timeout=30)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait()
            work(n)
        except BaseException as exc:  # handed to the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]


@pytest.fixture
def many_classes() -> Iterator[list[Any]]:
    """One widget of each of 24 classes, each with a key of its own (so plans differ)."""
    made = [
        type(f"Planned{i}", (w.DOMWidget,), {f"value{i}": Int(i).tag(sync=True)})()
        for i in range(24)
    ]
    yield made
    for widget in made:
        widget.close()


def test_threads_share_the_plan_cache_and_it_stays_bounded(many_classes: list[Any]) -> None:
    """The snapshot's threads plan at once: each gets its class's plan; the bound holds."""
    bound = 8  # a third of the classes: the cache fills and is emptied again and again
    reader = widget_reader.StateReader(w.widgets.widget, plan_cache_max=bound)
    sizes: list[int] = []

    def plan_every_class(n: int) -> None:
        for turn in range(30):
            for i in range(len(many_classes)):
                widget = many_classes[(i + n * 5 + turn) % len(many_classes)]
                plan = reader.plan_for(widget, widget.keys)
                assert plan.keys == widget.keys
                assert [key for key, _, _ in plan.entries] == widget.keys
                sizes.append(len(reader.plans))

    run_together(plan_every_class)
    assert sizes and max(sizes) <= bound
    assert 0 < len(reader.plans) <= bound
    for cls, plan in reader.plans.items():
        assert plan.keys == next(x for x in many_classes if type(x) is cls).keys


def test_snapshots_taken_at_once_on_several_threads_are_each_whole(
    many_classes: list[Any], widgets: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole replies, equal to ipywidgets' own, from one reader shared by every thread."""
    shared = widget_state._CurrentReader()
    monkeypatch.setattr(widget_state, "_current_reader", shared)
    ids = ids_of(many_classes + widgets)
    replies: list[tuple[dict[str, Any], list[Any]]] = []
    readers: set[int] = set()

    def snapshot(n: int) -> None:
        for _ in range(5):
            replies.append(build_widget_state_reply({"model_ids": ids}))
            readers.add(id(shared.get()))

    run_together(snapshot)
    assert len(replies) == THREADS * 5
    assert len(readers) == 1  # one reader made, whichever thread came first
    for content, buffers in replies:
        assert_same_as_update_states(content, buffers, ids)
