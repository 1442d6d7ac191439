"""The messages waiting for one tab, in order, folded where the rules of :mod:`.merging` allow.

Every operation is O(1), amortized, however much waits: the entries are an ordered
map (an entry leaves from the middle or moves to the end in O(1)); the entry a message may fold
into is found by its key (the last waiting widget entry of a comm or the one before it, the
last update of a display, the last significant entry for a stream), and whether anything it
does not cross stands after it is read from the stamp of the last such *wall* (and, for
widget state, of the last state of another model), not by scanning.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .merging import (
    CLEAR,
    DISPLAY,
    OTHER,
    OUTPUT,
    STREAM,
    WIDGET,
    Entry,
    Message,
    changes_of,
    kind_of,
    same,
    state_keys,
    value_of,
)

#: Cells whose merge count is kept for their ``idle`` at the most (older ones are forgotten:
#: a cell that never gets an ``idle`` must not keep its count for ever).
MAX_COUNTED_CELLS = 64


class Line:
    """The messages waiting for one tab, in order, folded where the rules allow (module
    docstring: every operation O(1), amortized)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[Entry, None] = OrderedDict()
        #: bytes the entries hold (their messages' frames, folded ones counted once)
        self.size = 0
        #: messages folded into another, and outputs skipped with their frame, by cell (the
        #: latest :data:`MAX_COUNTED_CELLS` cells)
        self.folded: dict[Any, int] = {}
        #: the same, in all
        self.folded_total = 0
        self._stamps = itertools.count(1)
        #: the last entry appended that is not widget state or a display update: a stream
        #: folds only into it, and a head stream may grow only while it is this one
        self._last_significant: Entry | None = None
        #: the last waiting widget entry of each comm (each links to the comm's entry before
        #: it, :attr:`Entry.before`), and update of each display
        self._widgets: dict[Any, Entry] = {}
        #: the comm and stamp of the last widget entry placed (appended or moved), and of the
        #: last one placed of another comm than that: whether another model's state stands
        #: after an entry, in O(1)
        self._placed: tuple[Any, int] = (None, 0)
        self._placed_other: tuple[Any, int] = (None, 0)
        #: for each comm with entries waiting, the entry that holds each key's latest waiting
        #: value: the value before the one a new update sets (:attr:`Entry.prevs`)
        self._values: dict[Any, dict[str, Entry]] = {}
        self._displays: dict[Any, Entry] = {}
        #: stamps of the last walls: for widget state (``other``), for display updates
        #: (``clear``, ``output``, ``other``)
        self._widget_wall = 0
        self._display_wall = 0
        #: the animation frame being watched: its ``clear_output``, the outputs after it, and a
        #: second ``clear_output`` of the same cell right after them (see :meth:`_frame`)
        self._frame_clear: Entry | None = None
        self._frame_outputs: list[Entry] = []
        self._next_clear: Entry | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def first(self) -> Entry:
        return next(iter(self.entries))

    def second(self) -> Entry | None:
        """The entry behind the first (None: there is none)."""
        walk = iter(self.entries)
        next(walk)
        return next(walk, None)

    def add(self, original: Any, msg: Message | None, size: int, counted: bool) -> None:
        """Queue one message (``msg`` decoded, or None for one read as ``other``)."""
        key: Any
        kind, key = kind_of(msg) if msg is not None else (OTHER, None)
        if msg is not None and self._fold(kind, key, msg, size):
            return
        entry = Entry(original, msg, kind, key, size, counted)
        entry.stamp = next(self._stamps)
        self.entries[entry] = None
        self.size += size
        if kind == WIDGET:
            assert msg is not None
            entry.before = self._widgets.get(key[0])
            entry.sets = state_keys(msg["content"]["data"])
            self._seed(entry, key[0], msg, entry.sets, set())
            self._widgets[key[0]] = entry
            self._place(key[0], entry.stamp)
            return
        if kind == DISPLAY:
            self._displays[key] = entry
            return
        self._last_significant = entry
        if kind != STREAM:
            self._display_wall = entry.stamp
            if kind == OTHER:
                self._widget_wall = entry.stamp
        self._frame(entry)

    def _fold(self, kind: str, key: Any, msg: Message, size: int) -> bool:
        """Fold ``msg`` into the entry it may join, if one waits and no wall stands after it."""
        if kind == STREAM:
            into = self._last_significant
            moves = False
        elif kind == WIDGET:
            return self._fold_widget(key, msg, size)
        elif kind == DISPLAY:
            into = self._displays.get(key)
            if into is not None and into.stamp < self._display_wall:
                into = None
            moves = True
        else:
            return False
        if into is None or not into.waiting or into.kind != kind or into.key != key:
            return False
        before = into.size
        into.fold(msg, size)
        self.size += into.size - before
        self._count(into.parent or (msg.get("parent_header") or {}).get("msg_id"))
        if moves:  # the later message's place
            into.stamp = next(self._stamps)
            self.entries.move_to_end(into)
        return True

    def _fold_widget(self, key: Any, msg: Message, size: int) -> bool:
        """Fold a widget state update into its model's entry, where the page would end the
        same and see every change it acts on (:mod:`.merging`): into the model's last entry
        of the same method, or the one before it when the last is of the other method and
        sets none of the keys either sets (``update`` and ``echo_update`` of one model cross
        where they touch different keys); not across a wall, nor where a key changes back
        (:func:`.merging.changes_of`); and, when another model's state stands after that
        entry, only if this update sets every key the entry sets (the merged update takes
        this one's place, so no write moves across another model's)."""
        comm = key[0]
        into = crossed = self._widgets.get(comm)
        if into is None:
            return False
        if into.key != key:
            into = into.before
        else:
            crossed = None
        if into is None or not into.waiting or into.key != key or into.stamp < self._widget_wall:
            return False
        data = msg["content"]["data"]
        keys, into_keys = state_keys(data), into.sets
        if crossed is not None and not crossed.sets.isdisjoint(keys | into_keys):
            return False
        if self._placed_after(comm) > into.stamp and not into_keys <= keys:
            return False
        changes = changes_of(into, msg, keys & into_keys)
        if changes is None:
            return False
        into.remember_prevs(changes)
        self._seed(into, comm, msg, keys, into_keys)
        into.sets = into_keys | keys
        before = into.size
        into.fold(msg, size)
        self.size += into.size - before
        self._count(into.parent or (msg.get("parent_header") or {}).get("msg_id"))
        if crossed is not None:  # the two swap places: relink the comm's entries
            into.before, crossed.before = crossed, into.before
            self._widgets[comm] = into
        into.stamp = next(self._stamps)  # the later message's place
        self.entries.move_to_end(into)
        self._place(comm, into.stamp)
        return True

    def _seed(self, entry: Entry, comm: Any, msg: Message, keys: set[str], known: set[str]) -> None:
        """With the update ``msg`` (setting ``keys``) now in ``entry``: remember, for the keys
        ``entry`` did not set (not in ``known``), the value each had before in an entry that
        still waits (a set back to it is a change the page acts on), and that ``entry`` now
        holds each key's latest value."""
        values = self._values.setdefault(comm, {})
        for key in keys:
            if key not in known:
                had = values.get(key)
                if had is not None and had.waiting and had.msg is not None:
                    old, value = value_of(had.msg, key), value_of(msg, key)
                    if not same(old, value):
                        if entry.prevs is None:
                            entry.prevs = {}
                        entry.prevs[key] = old
            values[key] = entry

    def _place(self, comm: Any, stamp: int) -> None:
        if self._placed[0] != comm:
            self._placed_other = self._placed
        self._placed = (comm, stamp)

    def _placed_after(self, comm: Any) -> int:
        """The stamp of the last widget entry placed of another comm than ``comm``."""
        return self._placed[1] if self._placed[0] != comm else self._placed_other[1]

    def _frame(self, entry: Entry) -> None:
        """Watch for a replaced animation frame, with ``entry`` (not widget state or a
        display update) just appended: an output of a cell arriving after ``clear_output``,
        outputs, ``clear_output`` (all of that cell, widget state and display updates may
        stand between) would replace that middle frame at once, so it is not sent, nor the
        second clear (the first one clears for the new output as it would have)."""
        first, second = self._frame_clear, self._next_clear
        if entry.kind == CLEAR:
            if first is not None and first.waiting and first.key == entry.key:
                if second is None:
                    self._next_clear = entry
                    return
                if second.waiting:  # clear, outputs, clear, clear: watch the last two
                    self._frame_clear, self._frame_outputs = second, []
                    self._next_clear = entry
                    return
            self._frame_clear, self._frame_outputs, self._next_clear = entry, [], None
            return
        parent = first.key if first is not None and first.waiting else None
        if entry.kind not in (STREAM, OUTPUT) or parent is None or entry.parent != parent:
            self._frame_clear, self._frame_outputs, self._next_clear = None, [], None
            return
        if second is not None and second.waiting:
            for skipped in (*self._frame_outputs, second):
                if skipped.waiting:
                    self._remove(skipped)
                    self._count(parent, skipped.stands_for)
            self._frame_outputs, self._next_clear = [], None
        elif second is not None:  # the second clear was sent: no frame to skip any more
            self._frame_clear, self._frame_outputs, self._next_clear = None, [], None
            return
        self._frame_outputs.append(entry)

    def _remove(self, entry: Entry) -> None:
        del self.entries[entry]
        self._left(entry)

    def _left(self, entry: Entry) -> None:
        entry.waiting = False
        entry.before = None  # a sent entry must not keep the ones before it alive
        self.size -= entry.size
        if entry.kind == WIDGET:
            self._forget(entry)
        elif entry.kind == DISPLAY and self._displays.get(entry.key) is entry:
            del self._displays[entry.key]
        elif entry is self._frame_clear:  # sent: its frame can no longer be skipped
            self._frame_clear, self._frame_outputs, self._next_clear = None, [], None
        if entry is self._last_significant:
            self._last_significant = None

    def _forget(self, entry: Entry) -> None:
        """A widget entry left: the line no longer holds it (nor its message) for its comm."""
        comm = entry.key[0]
        if self._widgets.get(comm) is entry:
            del self._widgets[comm]  # the comm's last: every other one has left
            self._values.pop(comm, None)
            return
        values = self._values.get(comm)
        if values is not None:
            for key in entry.sets:
                if values.get(key) is entry:
                    del values[key]

    def _count(self, parent: Any, n: int = 1) -> None:
        folded = self.folded
        folded[parent] = folded.pop(parent, 0) + n  # latest last
        if len(folded) > MAX_COUNTED_CELLS:
            del folded[next(iter(folded))]
        self.folded_total += n

    def pop(self) -> Entry:
        """The first entry, out of the line."""
        entry, _ = self.entries.popitem(last=False)
        self._left(entry)
        return entry

    def pop_second(self) -> Entry:
        """The entry behind the first, out of the line (it crosses the first, which waits)."""
        entry = self.second()
        assert entry is not None
        self._remove(entry)
        return entry

    def head_may_grow(self) -> bool:
        """Whether the first entry is a stream that a later one could still be folded into
        (nothing but what a stream crosses stands behind it)."""
        if not self.entries:
            return False
        head = self.first()
        return head.kind == STREAM and head is self._last_significant
