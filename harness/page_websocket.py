"""A page's own kernel websocket, read from outside the page (Playwright's frame events).

:class:`WebsocketLog` decodes every binary ``v1`` frame the page sends and receives on its
``/api/kernels/*/channels`` websockets, so what the frontend asks and what it gets can be
compared without touching the frontend; and which ``status`` messages the server counts for
its ``execution_state`` (:func:`tracked_statuses`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .ws_protocol import decode_v1, message_from_parts


@dataclass
class Frame:
    """One kernel message the page sent or received, decoded from its v1 frame."""

    t: float  # time.perf_counter() when Playwright reported it
    direction: str  # "sent" (page -> server) or "received"
    channel: str
    msg_type: str
    msg_id: str
    parent_msg_id: str
    parent_msg_type: str | None
    subshell_id: str | None
    content: dict[str, Any] = field(repr=False)
    #: time.perf_counter() when Playwright reported the websocket it went on
    socket_opened: float = 0.0


#: Requests that may get nothing back at all (a comm_open that its target accepts silently, a
#: comm_close): "in time" stays empty for them when nothing came.
NO_ANSWER = frozenset({"comm_open", "comm_close"})


class WebsocketLog:
    """Every kernel message on the page's kernel websockets (``/api/kernels/*/channels``).

    Attach it before ``page.goto``/``page.reload``; it follows every websocket the page opens,
    reloads included. Frames that are not binary v1 (JupyterLab negotiates v1) are counted in
    ``undecoded``. A frame's time is when Playwright delivered it, which is when it arrived
    only if the test was inside a Playwright call then (see :func:`wait_for`'s ``page``).
    """

    def __init__(self, page: Any) -> None:
        self._frames: list[Frame] = []
        self._lock = threading.Lock()
        self.undecoded = 0
        self.sockets: list[str] = []
        self._on_sent: list[Callable[[Frame], None]] = []
        page.on("websocket", self._attach)

    def on_sent(self, callback: Callable[[Frame], None]) -> None:
        """Call ``callback(frame)`` for every message the page sends from now on."""
        self._on_sent.append(callback)

    def _attach(self, ws: Any) -> None:
        if "/channels" not in ws.url:
            return
        self.sockets.append(ws.url)
        opened = time.perf_counter()
        ws.on("framesent", lambda payload: self._record("sent", payload, opened))
        ws.on("framereceived", lambda payload: self._record("received", payload, opened))

    def _record(self, direction: str, payload: bytes | str, socket_opened: float) -> None:
        now = time.perf_counter()
        if isinstance(payload, str):
            try:  # the legacy JSON protocol (Voila's frontend may use it)
                msg = json.loads(payload)
                channel = msg.get("channel", "?")
            except ValueError:
                self.undecoded += 1
                return
        else:
            try:
                channel, parts = decode_v1(payload)
                msg = message_from_parts(channel, parts)
            except ValueError:
                self.undecoded += 1
                return
        header = msg.get("header") or {}
        frame = Frame(
            t=now,
            direction=direction,
            channel=channel,
            msg_type=header.get("msg_type", ""),
            msg_id=header.get("msg_id", ""),
            parent_msg_id=(msg.get("parent_header") or {}).get("msg_id", ""),
            parent_msg_type=(msg.get("parent_header") or {}).get("msg_type"),
            subshell_id=header.get("subshell_id"),
            content=msg.get("content") or {},
            socket_opened=socket_opened,
        )
        with self._lock:
            self._frames.append(frame)
        if direction == "sent":
            for callback in self._on_sent:
                callback(frame)

    def unanswered(self, since: float) -> list[Frame]:
        """What the page sent on a websocket opened after ``since`` that nothing answered
        yet: no reply and no IOPub child (``NO_ANSWER`` messages aside). Empty once the
        page's requests are all served: a barrier the kernel's replies raise, not a quiet
        period. A frame is reported when the test is next inside a Playwright call, so one
        the page sent on its old websocket just before a reload at ``since`` may be reported
        after it; its answer went to that websocket, closed with the old page: it is the old
        page's, not one the new page waits for (seen on a loaded machine: a ``debug_request``
        of the page before the reload, left "unanswered since the reload")."""
        frames = self.frames(since)
        answered = {f.parent_msg_id for f in frames if f.direction == "received"}
        return [
            f
            for f in frames
            if f.direction == "sent"
            and f.socket_opened >= since
            and f.msg_type not in NO_ANSWER
            and f.msg_id not in answered
        ]

    def frames(self, since: float = 0.0) -> list[Frame]:
        with self._lock:
            return [f for f in self._frames if f.t >= since]

    def requests_after(
        self, since: float, limit: int = 30, until: float | None = None
    ) -> list[dict[str, Any]]:
        """The first ``limit`` messages the page sent after ``since``, each with when (s after
        ``since``) its reply or its first IOPub child arrived, or None if nothing came, and
        ``answered_before_until``: whether the reply (or, for messages without one, an IOPub
        child) arrived before ``until`` (e.g. while a cell still ran)."""
        frames = self.frames(since)
        rows = []
        for sent in [f for f in frames if f.direction == "sent"][:limit]:
            answers = [
                f for f in frames if f.direction == "received" and f.parent_msg_id == sent.msg_id
            ]
            reply = next((f for f in answers if f.channel == sent.channel), None)
            first_iopub = next((f for f in answers if f.channel == "iopub"), None)
            row: dict[str, Any] = {
                "sent_s": round(sent.t - since, 3),
                "channel": sent.channel,
                "msg_type": sent.msg_type,
                "subshell_id": sent.subshell_id,
                "reply_s": None if reply is None else round(reply.t - since, 3),
                "reply_type": None if reply is None else reply.msg_type,
                "first_iopub_s": None if first_iopub is None else round(first_iopub.t - since, 3),
                "iopub_types": sorted({f.msg_type for f in answers if f.channel == "iopub"}),
            }
            answered = reply or first_iopub
            if until is not None and not (answered is None and sent.msg_type in NO_ANSWER):
                row["answered_before_until"] = answered is not None and answered.t < until
            if sent.msg_type in ("comm_open", "comm_msg"):
                data = sent.content.get("data") or {}
                row["detail"] = sent.content.get("target_name") or data.get("method")
            elif sent.msg_type == "debug_request":
                row["detail"] = sent.content.get("command")
            rows.append(row)
        return rows


def format_requests(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table of :meth:`WebsocketLog.requests_after` rows."""

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [
        f"{'sent s':>7} {'channel':8} {'msg_type':26} {'detail':24} {'subshell':9} "
        f"{'reply s':>8} {'iopub s':>8} {'in time':8} iopub"
    ]
    for r in rows:
        in_time = {True: "yes", False: "no", None: ""}[r.get("answered_before_until")]
        lines.append(
            f"{r['sent_s']:7.2f} {r['channel']:8} {r['msg_type']:26} {r.get('detail') or '':24} "
            f"{(r['subshell_id'] or '-')[:8]:9} {seconds(r['reply_s']):>8} "
            f"{seconds(r['first_iopub_s']):>8} {in_time:8} {','.join(r['iopub_types'])}"
        )
    return "\n".join(lines)


def untracked_message_types() -> list[str]:
    """jupyter_server's default ``untracked_message_types``: a status whose parent is of one of
    these types does not change the server's ``execution_state``; any other status does."""
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    default = MappingKernelManager.class_traits()["untracked_message_types"].default()
    assert default is not None  # a List trait with a default value
    return list(default)


def tracked_statuses(frames: Iterable[Frame], state: str) -> list[Frame]:
    """The IOPub ``status: <state>`` messages in ``frames`` that set the server's
    ``execution_state`` (their parent's msg_type is tracked, or they have no parent)."""
    untracked = set(untracked_message_types())
    return [
        f
        for f in frames
        if f.direction == "received"
        and f.channel == "iopub"
        and f.msg_type == "status"
        and f.content.get("execution_state") == state
        and f.parent_msg_type not in untracked
    ]
