"""Which IOPub messages waiting for one tab may reach it as one, and how they become one.

A tab that is over the IOPub rate, or behind (its outbox not drained), gets the messages that
wait for it *merged* (docs/PROTOCOL.md section 8): what it shows at the end is exactly what it
would show had it received every message, in fewer messages. This module is the rules, and
nothing of time or sockets: how a message is read (:func:`kind_of`) and what an :class:`Entry`
becomes when another is folded into it; :class:`~.line.Line` keeps the entries in arrival
order and decides, in O(1), whether a message folds into one that waits or is appended.

The kinds a message is read as (:func:`kind_of`), and what each may be folded with:

* ``stream`` of one parent and one name: texts joined (the page joins consecutive streams
  of one name and folds ``\\r``, ``\\b`` and ANSI codes over the joined text anyway); the
  joined stream keeps the first one's place;
* ``widget``: an ipywidgets ``comm_msg`` whose ``data.method`` is ``update`` or
  ``echo_update`` with a ``state`` object, for one comm and one method: the union of keys,
  the later value of each key, the later buffers for the paths under a later key (a model's
  state is the merge of its updates), except where a key *changes back* (:func:`changes_of`:
  to or from ``None``, or to the value it had before): the page acts on every change of a
  key, and a command trait set then reset at once (plotly's ``FigureWidget``) is a change
  folding would lose. :class:`~.line.Line` decides where the merged update stands (the
  later one's place, only where no other model's state is crossed or the later one sets
  every key the earlier set) and lets ``update`` and ``echo_update`` of one model cross
  each other where they set different keys;
* ``display``: ``update_display_data`` of one ``display_id``: the later replaces the earlier,
  in the later one's place;
* ``clear`` / ``output``: a ``clear_output`` and the ``display_data`` (without a
  ``display_id``), ``execute_result`` and ``stream`` outputs of its cell: a whole frame of an
  animation loop that the next frame would have replaced at once is skipped (the loop's final
  frame is exact);
* everything else (``other``) is never folded, skipped or crossed: a custom comm's message,
  an Output widget's ``msg_id`` or ``outputs`` update (they decide what the widget shows of
  the cell's outputs), ``comm_open``, ``comm_close``, a ``display_data`` with a
  ``display_id`` (a page updates every display of a known id with it), ``execute_result``
  outside a frame, ``error``, ``status``, replies, ``input_request``, anything unknown.

Folding moves content across the messages between the two, so it may only cross messages
whose relative order does not change what the page ends with: a stream
crosses widget state and display updates (not another output); widget state crosses outputs,
``clear_output``, other comms' state (only when it sets again every key it moves past them)
and its own comm's state of the other method that sets none of its keys; a display update
crosses streams, widget state and other displays' updates.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

#: The kinds a waiting message is read as (see the module docstring).
STREAM, WIDGET, DISPLAY, CLEAR, OUTPUT, OTHER = (
    "stream",
    "widget",
    "display",
    "clear",
    "output",
    "other",
)

#: The keys an entry that is not widget state sets (shared: see :attr:`Entry.sets`).
NO_KEYS: frozenset[str] = frozenset()

#: The ipywidgets methods whose ``state`` is a model's new state (later keys win).
WIDGET_STATE_METHODS = frozenset({"update", "echo_update"})

#: The keys of an Output widget's state that decide what it shows of the cell's outputs: which
#: outputs it captures (``msg_id``) and the outputs it holds (``outputs``, set by
#: ``append_stdout`` and friends, beside what it captured): their order against the cell's
#: outputs is what the widget ends with.
OUTPUT_WIDGET_KEYS = frozenset({"msg_id", "outputs"})

#: The kinds that cross a waiting stream (and that a stream crosses).
STATE_KINDS = frozenset({WIDGET, DISPLAY})

#: A message as the rules read it: ``header``, ``parent_header``, ``metadata``, ``content``
#: and ``buffers`` (the shape of ``Session.deserialize``'s result).
Message = dict[str, Any]


def kind_of(msg: Message) -> tuple[str, Any]:
    """The kind of ``msg`` and the key two messages of that kind must share to be folded."""
    msg_type = msg["header"].get("msg_type")
    content = msg.get("content")
    if not isinstance(content, dict):
        return OTHER, None
    parent = (msg.get("parent_header") or {}).get("msg_id")
    if msg_type == "stream" and isinstance(content.get("text"), str):
        return STREAM, (parent, content.get("name"))
    if msg_type == "comm_msg":
        data = content.get("data")
        if (
            isinstance(data, dict)
            and data.get("method") in WIDGET_STATE_METHODS
            and isinstance(data.get("state"), dict)
            and OUTPUT_WIDGET_KEYS.isdisjoint(data["state"])
            and isinstance(data.get("buffer_paths", []), list)
        ):
            return WIDGET, (content.get("comm_id"), data["method"])
        return OTHER, None
    display_id = (content.get("transient") or {}).get("display_id")
    if msg_type == "update_display_data":
        return (DISPLAY, display_id) if display_id else (OTHER, None)
    if msg_type == "clear_output":
        return CLEAR, parent
    if msg_type in ("display_data", "execute_result") and not display_id:
        return OUTPUT, parent
    return OTHER, None


class Entry:
    """One message waiting for a tab: as it came (``original``, sent unchanged) until another
    is folded into it, then as the message that stands for both (:meth:`message`)."""

    __slots__ = (
        "_texts",
        "before",
        "born",
        "counted",
        "key",
        "kind",
        "msg",
        "original",
        "parent",
        "prevs",
        "sets",
        "size",
        "stamp",
        "stands_for",
        "text_size",
        "waiting",
    )

    def __init__(
        self, original: Any, msg: Message | None, kind: str, key: Any, size: int, counted: bool
    ) -> None:
        self.original = original
        self.msg = msg
        self.kind = kind
        self.key = key
        self.size = size
        #: it counts toward the tab's message rate (stock's rule: not status, comm_open,
        #: execute_input)
        self.counted = counted
        #: how many messages this entry stands for (1: it is one message as it came)
        self.stands_for = 1
        self.parent = (msg.get("parent_header") or {}).get("msg_id") if msg else None
        #: a stream's text size (what a page renders of it)
        self.text_size = len(msg["content"]["text"]) if kind == STREAM and msg else 0
        self._texts: list[str] | None = None
        #: its place in the line (larger: later), given by the line
        self.stamp = 0
        #: when the message whose place it has arrived (the pacer's clock; a fold that moves
        #: it to the later message's place makes it that message's time)
        self.born = 0.0
        #: still in the line (False once sent or skipped)
        self.waiting = True
        #: widget state: the entry of the same comm that stood just before this one when it
        #: was placed (the line's link to a model's second-latest entry)
        self.before: Entry | None = None
        #: widget state: the value each key had before the one this entry holds, where the
        #: line knows it (a set back to it is a change the page must see: :func:`changes_of`)
        self.prevs: dict[str, Any] | None = None
        #: widget state: the keys it sets (:func:`state_keys`), kept by the line; one shared
        #: empty set for every other entry (a set of its own would cost each 216 bytes)
        self.sets: AbstractSet[str] = NO_KEYS

    @property
    def merged(self) -> bool:
        return self.stands_for > 1

    @property
    def name(self) -> str:
        """A stream's name (``stdout``, ``stderr``)."""
        return str(self.key[1]) if self.kind == STREAM else ""

    def texts(self) -> list[str]:
        """A stream's text, in the pieces it came in (not joined: the page's view of the
        text is built piece by piece, :class:`~.budgets.PageText`)."""
        if self._texts is not None:
            return self._texts
        assert self.msg is not None
        return [self.msg["content"]["text"]]

    def message(self) -> Message:
        """The message this entry stands for (only for a merged entry)."""
        assert self.msg is not None
        if self._texts is not None:  # joined once, when sent: folding n lines costs O(n)
            self.msg["content"]["text"] = "".join(self._texts)
            self._texts = None
        return self.msg

    def handed_over(self) -> Any:
        """What the tab gets for this entry when it is handed over (a close, a replay): the
        original as it came, or, merged, the message that stands for what it folded."""
        return self.message() if self.merged else self.original

    def fold(self, later: Message, size: int) -> None:
        """Fold ``later`` (of the same kind and key) into this entry."""
        msg = self.msg
        assert msg is not None
        if self.stands_for == 1:  # copy what folding changes: the original stays intact
            msg = self.msg = {**msg, "content": dict(msg["content"])}
            if self.kind == STREAM:
                self._texts = [msg["content"]["text"]]
        self.stands_for += 1
        msg["header"] = later["header"]  # a fresh msg_id: the tab never saw it
        if self.kind == STREAM:
            assert self._texts is not None
            self._texts.append(later["content"]["text"])
            self.text_size += len(later["content"]["text"])
            self.size += size
        elif self.kind == WIDGET:
            content = msg["content"]
            buffers, later_buffers = msg.get("buffers") or [], later.get("buffers") or []
            # the JSON part's size is about the larger of the two; the buffers are the kept ones
            json_size = max(self.size - _nbytes(buffers), size - _nbytes(later_buffers))
            content["data"], msg["buffers"] = merge_widget_state(
                content["data"], buffers, later["content"]["data"], later_buffers
            )
            # the later message's place: its parent too (it is the later message, grown)
            msg["parent_header"] = later.get("parent_header") or {}
            self.size = json_size + _nbytes(msg["buffers"])
        else:  # DISPLAY: the later replaces the earlier, parent and all
            self.msg = {**later, "content": dict(later["content"])}
            self.size = size

    def remember_prevs(self, changes: list[tuple[str, Any]]) -> None:
        """Before a later update is folded in: the value of each key it changes (``changes``
        from :func:`changes_of`)."""
        if changes:
            if self.prevs is None:
                self.prevs = {}
            self.prevs.update(changes)


def state_keys(data: dict[str, Any]) -> set[str]:
    """The keys an ipywidgets state update sets: its ``state`` keys and, for a value that is
    all binary (absent from ``state``), its ``buffer_paths`` heads."""
    paths = data.get("buffer_paths")
    if not paths:
        return set(data["state"])
    return set(data["state"]) | {path[0] for path in paths if path}


class Binary(tuple[Any, ...]):
    """A key's value that lives, at least in part, in the message's buffers: its JSON part
    and the buffers under it, by path (never ``None``)."""


def value_of(msg: Message, key: str) -> Any:
    """A key's value in a state update ``msg``, as the page's model would hold it."""
    data = msg["content"]["data"]
    paths = data.get("buffer_paths")
    if not paths:
        return data["state"].get(key)
    under = tuple(
        (tuple(path), buf)
        for path, buf in zip(paths, msg.get("buffers") or [], strict=False)
        if path and path[0] == key
    )
    return Binary((data["state"].get(key), under)) if under else data["state"].get(key)


def same(a: Any, b: Any) -> bool:
    """JSON equality as the page's ``_.isEqual`` reads it at the top (``true`` is not ``1``;
    buffers compare by their bytes)."""
    return type(a) is type(b) and a == b


def changes_of(earlier: Entry, later: Message, common: set[str]) -> list[tuple[str, Any]] | None:
    """The keys among ``common`` (set by both) that folding ``later`` (a state update) into the
    widget entry ``earlier`` changes, with ``earlier``'s value of each; or None where it would
    lose a change the page acts on: ``later`` sets a key to ``None`` where ``earlier`` does
    not, or the reverse (a command set then reset, or the reset between two commands that may
    be equal), or back to the value it had before ``earlier``'s (a pulse). The page's change
    events fire on every change (Backbone's ``set`` compares with the current value), so such
    a key keeps every value in order: ``later`` is not folded."""
    assert earlier.msg is not None
    prevs = earlier.prevs
    changes = []
    for key in common:
        old, new = value_of(earlier.msg, key), value_of(later, key)
        if (old is None) != (new is None):
            return None
        if prevs is not None and key in prevs and same(prevs[key], new):
            return None
        if not same(old, new):
            changes.append((key, old))
    return changes


def _nbytes(buffers: list[Any]) -> int:
    return sum(len(b) for b in buffers)


def merge_widget_state(
    data: dict[str, Any], buffers: list[Any], later: dict[str, Any], later_buffers: list[Any]
) -> tuple[dict[str, Any], list[Any]]:
    """Two ipywidgets state updates of one model as one: every key, the later value of each,
    and the buffers at the paths under the keys each value came from (kept in order with
    ``buffer_paths``)."""
    state = {**data["state"], **later["state"]}
    later_paths = later.get("buffer_paths") or []
    # A key whose value is all binary is absent from ``state`` (ipywidgets moves it into the
    # buffers): the later message sets every key of its state and of its buffer paths.
    later_keys = set(later["state"]) | {path[0] for path in later_paths if path}
    paths: list[Any] = []
    kept: list[Any] = []
    for path, buf in zip(data.get("buffer_paths") or [], buffers, strict=False):
        if path and path[0] not in later_keys:
            paths.append(path)
            kept.append(buf)
    for path, buf in zip(later_paths, later_buffers, strict=False):
        paths.append(path)
        kept.append(buf)
    merged = {**later, "state": state}
    if paths or "buffer_paths" in data or "buffer_paths" in later:
        merged["buffer_paths"] = paths
    return merged, kept
