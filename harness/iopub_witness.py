"""A client of a kernel itself, beside a server's websockets: what the kernel has published.

A test of what a server holds back from a tab needs to know what the kernel has already sent
without asking the server: :class:`IOPubWitness` subscribes to the kernel's IOPub from its
connection file (CurveZMQ keys included) and waits until a stream text was published.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from jupyter_client import BlockingKernelClient

from .polling import wait_until


class IOPubWitness:
    """The kernel's own IOPub, read directly (not paced by any server)."""

    def __init__(self, connection_file: Path) -> None:
        self.client = BlockingKernelClient(connection_file=str(connection_file))
        self.client.load_connection_file()
        self.client.start_channels(shell=False, stdin=False, hb=False, control=False)
        self._stream = ""

    def close(self) -> None:
        self.client.stop_channels()

    def __enter__(self) -> IOPubWitness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def published(self, text: str) -> bool:
        """Whether the kernel's stream output so far ends with a piece holding ``text`` (what
        has arrived is read first)."""
        with contextlib.suppress(Exception):  # queue.Empty: nothing more for now
            while True:
                msg = self.client.get_iopub_msg(timeout=0.05)
                if msg["msg_type"] == "stream":
                    # keep only a tail: the text may be megabytes
                    self._stream = (self._stream + msg["content"]["text"])[-4096:]
        return text in self._stream

    def wait_published(self, text: str, timeout: float = 240) -> None:
        wait_until(lambda: self.published(text), timeout=timeout, what=f"{text!r} from the kernel")
