"""The kernel's part of the journal: its hooks, and the ``journal_request`` on control.

:class:`JournalingKernel` is a mixin of :class:`~ipykernel_ext.kernel.ipkernel.ExtKernel`.
With no :attr:`~JournalingKernel.journal` (a kernel not launched to outlive its server) it
does what stock does, and ``journal_request`` answers with no cells. With one, it tells the
journal when a cell starts (ipykernel's ``_publish_execute_input``, which has the whole
request), ends (``finish_metadata``, called with the ``execute_reply`` content just before
it is sent) and asks ``input()`` (``_input_request``); the IOPub thread feeds it the outputs.

``journal_request`` (docs/PROTOCOL.md section 9) is answered on the control thread, while a
cell runs, without the ``busy``/``idle`` pair (as the other queries): ``ack`` drops ended
cells a server has whole; ``again`` has the IOPub thread send those cells again (each after a
``clear_output``) before anything it sends later, and a cell of them still running sends its
``execute_reply``, when it ends, to the asker's routing id on shell as well (jupyter_server's
shared channels use one id on control and shell); the reply lists the cells kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...protocol import error_content
from .journal import Journal

#: How long the control thread waits for the IOPub thread to send cells again (seconds).
AGAIN_WAIT = 10.0

#: The request's fields, each a list of request msg_ids.
FIELDS = ("ack", "again")


def _ids(content: Any) -> dict[str, list[str]]:
    """The request's fields, checked: a clear error for anything else."""
    if not isinstance(content, dict):
        raise TypeError(f"journal_request content must be an object, not {type(content).__name__}")
    unknown = sorted(set(content) - set(FIELDS))
    if unknown:
        raise ValueError(f"journal_request has no field {unknown}; its fields: {list(FIELDS)}")
    out: dict[str, list[str]] = {}
    for name in FIELDS:
        value = content.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"journal_request {name} must be a list of request msg_ids")
        out[name] = value
    return out


class JournalingKernel:
    """The kernel's hooks into its :class:`~.journal.Journal`, and its control request."""

    #: the journal (set by the app for a kernel launched to outlive its server), or None
    journal: Journal | None = None

    # What this mixin needs of ipykernel's Kernel (declared for the type checker only).
    session: Any
    iopub_thread: Any
    log: Any
    _topic: Callable[[str], bytes]

    def _publish_execute_input(self, code: str, parent: Any, execution_count: int) -> None:
        if self.journal is not None and isinstance(parent, dict):
            self.journal.started(parent, execution_count)
        super()._publish_execute_input(code, parent, execution_count)  # type: ignore[misc]  # a mixin: ipykernel's Kernel is next

    def finish_metadata(self, parent: Any, metadata: Any, reply_content: Any) -> Any:
        metadata = super().finish_metadata(parent, metadata, reply_content)  # type: ignore[misc]  # a mixin: ipykernel's Kernel is next
        journal = self.journal
        if journal is not None and isinstance(parent, dict) and isinstance(reply_content, dict):
            header = parent.get("header") or {}
            if header.get("msg_type") == "execute_request":
                journal.ended(str(header.get("msg_id")), reply_content, metadata)
        return metadata

    async def execute_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """Stock's; then the reply again to each server that asked for the cell while it ran
        (:meth:`Journal.reply_also_to`): the request's own peer, a server before, is gone.
        On the cell's thread and stream, before its ``idle``, as stock's own reply."""
        await super().execute_request(stream, ident, parent)  # type: ignore[misc]  # a mixin: ipykernel's Kernel is next
        journal = self.journal
        msg_id = (parent.get("header") or {}).get("msg_id") if isinstance(parent, dict) else None
        if journal is None or not isinstance(msg_id, str):
            return
        reply, metadata, idents = journal.replies_to(msg_id)
        for to in idents:
            self.session.send(stream, "execute_reply", reply, parent, metadata=metadata, ident=to)

    def _input_request(self, prompt: str, ident: Any, parent: Any, password: bool = False) -> Any:
        journal = self.journal
        msg_id = (parent.get("header") or {}).get("msg_id") if isinstance(parent, dict) else None
        if journal is None or not isinstance(msg_id, str):
            return super()._input_request(prompt, ident, parent, password)  # type: ignore[misc]  # a mixin: ipykernel's Kernel is next
        journal.asking(msg_id, {"prompt": prompt, "password": password})
        try:
            return super()._input_request(prompt, ident, parent, password)  # type: ignore[misc]  # a mixin: ipykernel's Kernel is next
        finally:
            journal.answered(msg_id)

    def journal_request(self, stream: Any, ident: list[bytes], parent: dict[str, Any]) -> None:
        """Acknowledge, send again, and list the journaled cells (module docstring)."""
        journal = self.journal
        try:
            asked = _ids(parent["content"])
            if journal is None:
                content: dict[str, Any] = {"status": "ok", "journaling": False, "cells": []}
            else:
                journal.ack(asked["ack"])
                cells = None
                if asked["again"]:
                    journal.reply_also_to(asked["again"], ident)
                    cells = self._send_again(journal, asked["again"])
                content = {
                    "status": "ok",
                    "journaling": True,
                    "max_bytes": journal.max_bytes,
                    "cells": journal.summary() if cells is None else cells,
                }
        except Exception as exc:
            self.log.warning("journal_request failed: %s", exc)
            content = error_content(exc)
        self.session.send(stream, "journal_reply", content, parent, ident)

    def _send_again(self, journal: Journal, msg_ids: list[str]) -> list[dict[str, Any]] | None:
        """Have the IOPub thread send the cells again, in its order (:meth:`Journal.again`);
        the cells as they were then (what it sent with an ``idle`` is what it lists ended),
        or None if the thread did not get to it within :data:`AGAIN_WAIT` (a subscriber
        holding it up: the caller lists the cells as they are now)."""
        thread = self.iopub_thread
        done = threading.Event()
        listed: list[list[dict[str, Any]]] = []

        def send() -> None:
            try:
                frames, cells = journal.again(msg_ids, self.session, self._topic)
                listed.append(cells)
                for one in frames:
                    thread.socket.send_multipart(one)
            finally:
                done.set()

        thread.schedule(send)
        done.wait(AGAIN_WAIT)
        return listed[0] if listed else None
