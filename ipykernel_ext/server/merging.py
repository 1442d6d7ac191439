"""Which IOPub messages waiting for one tab may reach it as one, and how they become one.

A tab that is over the IOPub rate, or behind (its outbox not drained), gets the messages that
wait for it *merged* (docs/PROTOCOL.md section 8): what it shows at the end is exactly what it
would show had it received every message, in fewer messages. This module is the rules, and
nothing of time or sockets: a :class:`Line` of :class:`Entry` objects in arrival order, where
:meth:`Line.add` either folds a message into one that waits or appends it.

The kinds a message is read as (:func:`kind_of`), and what each may be folded with:

* ``stream`` of one parent and one name: texts joined (the page joins consecutive streams
  of one name and folds ``\\r``, ``\\b`` and ANSI codes over the joined text anyway);
* ``widget``: an ipywidgets ``comm_msg`` whose ``data.method`` is ``update`` or
  ``echo_update`` with a ``state`` object, for one comm and one method: the union of keys,
  the later value of each key, the later buffers for the paths under a later key (a model's
  state is the merge of its updates);
* ``display``: ``update_display_data`` of one ``display_id``: the later replaces the earlier
  (it replaces the output wherever it is shown);
* ``clear`` / ``output``: a ``clear_output`` and the ``display_data``, ``execute_result`` and
  ``stream`` outputs of its cell: a whole frame of an animation loop that the next frame
  would have replaced at once is skipped (the loop's final frame is exact);
* everything else (``other``) is never folded, skipped or crossed: a custom comm's message,
  ``comm_open``, ``comm_close``, ``display_data`` outside a skipped frame, ``execute_result``,
  ``error``, ``status``, replies, ``input_request``, anything unknown.

Folding moves the later message's content back to the waiting one's place, so it may only
cross messages whose relative order does not change what the page ends with
(:func:`crosses`): a stream crosses widget state and display updates (not another output);
widget state crosses outputs and other comms' state; a display update crosses streams,
widget state and other displays' updates. An ``update`` that sets an Output widget's
``msg_id`` decides which outputs that widget captures, so it is ``other``: nothing crosses it.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
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

#: The ipywidgets methods whose ``state`` is a model's new state (later keys win).
WIDGET_STATE_METHODS = frozenset({"update", "echo_update"})

#: The key of an Output widget's state that routes the cell's outputs into it.
OUTPUT_WIDGET_ROUTE_KEY = "msg_id"

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
            and OUTPUT_WIDGET_ROUTE_KEY not in data["state"]
            and isinstance(data.get("buffer_paths", []), list)
        ):
            return WIDGET, (content.get("comm_id"), data["method"])
        return OTHER, None
    if msg_type == "update_display_data":
        display_id = (content.get("transient") or {}).get("display_id")
        return (DISPLAY, display_id) if display_id else (OTHER, None)
    if msg_type == "clear_output":
        return CLEAR, parent
    if msg_type in ("display_data", "execute_result"):
        return OUTPUT, parent
    return OTHER, None


def crosses(kind: str, key: Any, waiting: Entry) -> bool:
    """Whether a message of ``kind``/``key`` may be folded into one that waits before
    ``waiting`` (that is, moved before it) without changing what the page ends with."""
    other = waiting.kind
    if kind == STREAM:
        return other in (WIDGET, DISPLAY)
    if kind == WIDGET:
        if other == WIDGET:
            return bool(waiting.key[0] != key[0])
        return other in (STREAM, DISPLAY, CLEAR, OUTPUT)
    if kind == DISPLAY:
        return other in (STREAM, WIDGET) or (other == DISPLAY and waiting.key != key)
    return False


class Entry:
    """One message waiting for a tab: as it came (``original``, sent unchanged) until another
    is folded into it, then as the message that stands for both (:meth:`message`)."""

    __slots__ = (
        "_texts",
        "counted",
        "key",
        "kind",
        "msg",
        "original",
        "parent",
        "size",
        "stands_for",
        "text_size",
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

    @property
    def merged(self) -> bool:
        return self.stands_for > 1

    def message(self) -> Message:
        """The message this entry stands for (only for a merged entry)."""
        assert self.msg is not None
        if self._texts is not None:  # joined once, when sent: folding n lines costs O(n)
            self.msg["content"]["text"] = "".join(self._texts)
            self._texts = None
        return self.msg

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
            self.size = json_size + _nbytes(msg["buffers"])
        else:  # DISPLAY: the later replaces the earlier
            self.msg = {**later, "content": dict(later["content"])}
            self.size = size


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


class Line:
    """The messages waiting for one tab, in order, folded where the rules allow."""

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()
        #: bytes the entries hold (their messages' frames, folded ones counted once)
        self.size = 0
        #: messages folded into another, and outputs skipped with their frame, by cell
        self.folded: dict[Any, int] = {}
        #: the same, in all
        self.folded_total = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, original: Any, msg: Message | None, size: int, counted: bool) -> None:
        """Queue one message (``msg`` decoded, or None for one read as ``other``)."""
        kind, key = kind_of(msg) if msg is not None else (OTHER, None)
        entries = self.entries
        if kind in (STREAM, WIDGET, DISPLAY):
            assert msg is not None
            for waiting in reversed(entries):
                if waiting.kind == kind and waiting.key == key:
                    before = waiting.size
                    waiting.fold(msg, size)
                    self.size += waiting.size - before
                    self._count(waiting.parent or (msg.get("parent_header") or {}).get("msg_id"))
                    return
                if not crosses(kind, key, waiting):
                    break
        entry = Entry(original, msg, kind, key, size, counted)
        if kind in (STREAM, OUTPUT):
            self._skip_replaced_frame(entry.parent)
        entries.append(entry)
        self.size += size

    def _skip_replaced_frame(self, parent: Any) -> None:
        """An output of ``parent`` arrives after ``clear_output``, outputs, ``clear_output``:
        the tab would replace that middle frame at once, so it is not sent (nor the second
        clear: the first one clears for the new output as it would have)."""
        entries = self.entries
        second = len(entries) - 1
        while second >= 0 and entries[second].kind in (WIDGET, DISPLAY):
            second -= 1
        if second < 0 or entries[second].kind != CLEAR or entries[second].key != parent:
            return
        first = second - 1
        while first >= 0 and (
            entries[first].kind in (WIDGET, DISPLAY)
            or (entries[first].kind in (STREAM, OUTPUT) and entries[first].parent == parent)
        ):
            first -= 1
        if first < 0 or entries[first].kind != CLEAR or entries[first].key != parent:
            return
        # Take the tail off after the first clear (the tail is short: frames collapse as they
        # come), and put back what is not the replaced frame's output (state updates).
        tail = [entries.pop() for _ in range(len(entries) - first - 1)]
        tail.reverse()
        for index, entry in enumerate(tail):
            if index + first + 1 > second or entry.kind in (WIDGET, DISPLAY):
                entries.append(entry)
            else:
                self.size -= entry.size
                self._count(parent, entry.stands_for)

    def _count(self, parent: Any, n: int = 1) -> None:
        self.folded[parent] = self.folded.get(parent, 0) + n
        self.folded_total += n

    def pop(self) -> Entry:
        entry = self.entries.popleft()
        self.size -= entry.size
        return entry

    def head_may_grow(self) -> bool:
        """Whether the first entry is a stream that a later one could still be folded into
        (nothing but what a stream crosses stands behind it)."""
        entries = self.entries
        if not entries or entries[0].kind != STREAM:
            return False
        return all(e.kind in (WIDGET, DISPLAY) for e in islice(entries, 1, None))
