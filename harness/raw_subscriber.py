"""A bare ``zmq.SUB`` on a kernel's IOPub: a subscriber the tests and benchmarks control.

Unlike jupyter_client's channel it reads only when asked and sizes its queue and buffer, so
it can be a subscriber that stalls, or one in a process of its own; it counts to a barrier
(:meth:`RawSubscriber.read_to_barrier`), never to a quiet period, in a test.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import zmq
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.session import Session

from ipykernel_ext.endpoints import apply_curve_client, channel_endpoint, curve_keys


class RawSubscriber:
    """A bare ``zmq.SUB`` on a kernel's IOPub, with the kernel's CurveZMQ keys if it has any.

    ``rcvhwm`` and ``rcvbuf`` (0: the OS default) are set before connect (libzmq sizes a
    pipe when it is made), so a subscriber that stops reading holds at most that much on its
    side. ``rcvbuf`` is 64 KiB by default, not less: with a receive buffer smaller than a TCP
    segment on loopback (about 64 KiB) Linux never reopens a window it closed, the kernel's
    side falls back to zero-window probes with growing gaps, and a stalled subscriber that
    reads again crawls (about 3 messages a second, on a loaded machine: 392 read in 120 s).
    The constructor returns once the kernel has the subscription: the ``iopub_welcome`` for
    this subscriber's own topic came, so no welcome of its own is sent after. Used by the
    IOPub tests and ``benchmarks/iopub_stall.py``.
    """

    def __init__(self, km: KernelManager, rcvhwm: int = 1, rcvbuf: int = 64 * 1024) -> None:
        self.session = Session(key=km.session.key, signature_scheme=km.session.signature_scheme)
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.socket = context.socket(zmq.SUB)
        self.socket.linger = 0
        self.socket.rcvhwm = rcvhwm
        if rcvbuf:
            self.socket.rcvbuf = rcvbuf
        info = km.get_connection_info()
        apply_curve_client(self.socket, curve_keys(info))
        self.socket.subscribe(b"")
        # XPUB passes on only the first subscription to a topic, so b"" from a second client
        # brings no iopub_welcome; a topic of our own does, and proves both are in place.
        self.token = os.urandom(8).hex().encode()
        self.socket.subscribe(self.token)
        #: messages read before the constructor returned (the welcomes, and anything the kernel
        #: sent before them, e.g. the idle of a client's last kernel_info_request): each still
        #: takes a place in the kernel's queue for this subscriber until libzmq tells the
        #: kernel of reads, once about half a queue was read.
        self.read_at_start = 0
        self.socket.connect(channel_endpoint(info, "iopub"))
        self._wait_for_own_welcome()

    def _wait_for_own_welcome(self, timeout: float = 30) -> None:
        """Read until the ``iopub_welcome`` for this subscriber's own topic.

        Not the first welcome: the only subscriber of b"" also gets one for b"", and libzmq
        sends b"" first (the root of its subscription trie), so stopping there would leave
        the token's welcome still to be sent, after the caller's next step: a test that took
        ``iopub_stats()["sent"]`` as its baseline would count it as one of its cell's
        messages, stop waiting before the cell's idle was sent, and see its barrier overtake
        that idle. Once the token's welcome is here, the kernel has sent every welcome this
        subscriber brings, so nothing of its own is left to come later.
        """
        deadline = time.monotonic() + timeout
        own = self.token.decode()
        while True:
            msg = self.recv(timeout=max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise TimeoutError(f"no iopub_welcome for a raw subscriber in {timeout} s")
            self.read_at_start += 1
            if (
                msg["header"]["msg_type"] == "iopub_welcome"
                and json.loads(bytes(msg["content"])).get("subscription") == own
            ):
                return

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """One message (content left packed), or None after ``timeout`` seconds."""
        if not self.socket.poll(int(timeout * 1000)):
            return None
        _idents, frames = self.session.feed_identities(self.socket.recv_multipart())
        return self.session.deserialize(frames, content=False)

    def drain(self, quiet: float = 2) -> int:
        """Read what this subscriber holds, until nothing comes for ``quiet`` s; how many.

        A quiet period: for benchmarks. A test counts with :meth:`read_to_barrier`.
        """
        held = 0
        while self.recv(timeout=quiet) is not None:
            held += 1
        return held

    def read_to_barrier(
        self, kc: BlockingKernelClient, timeout: float = 120, resend: float = 1.0
    ) -> list[dict[str, Any]]:
        """Every message before the ``idle`` of a barrier control ``kernel_info_request``.

        Whatever the kernel handed to its socket before the barrier comes first (one socket,
        in order), so this is all this subscriber holds or will get of it. A subscriber whose
        queue is full (a stalled one, one given up) loses the barrier's own messages, so a new
        barrier is sent whenever nothing came for ``resend`` s: that only paces the barriers,
        the end is still a barrier's idle. The barriers' busy/idle are left out; their
        control replies are left for :func:`get_reply` to skip. ``timeout`` is a hang guard.
        """
        barriers: set[str] = set()

        def send_barrier() -> None:
            barrier = kc.session.msg("kernel_info_request", {})
            barriers.add(barrier["header"]["msg_id"])
            kc.control_channel.send(barrier)

        send_barrier()
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no barrier's idle reached the subscriber in {timeout} s "
                    f"({len(barriers)} barriers sent, {len(seen)} other messages read)"
                )
            msg = self.recv(timeout=min(resend, remaining))
            if msg is None:
                send_barrier()
            elif msg["parent_header"].get("msg_id") not in barriers:
                seen.append(msg)
            elif msg["header"]["msg_type"] == "status" and b'"idle"' in bytes(msg["content"]):
                return seen

    def read_until(
        self, done: Callable[[dict[str, Any]], bool], timeout: float
    ) -> list[dict[str, Any]]:
        """Messages up to and including the first for which ``done`` is true.

        Stops early, without such a message, when none comes within what is left of
        ``timeout`` s: the caller's assertions then say what was missing.
        """
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while (msg := self.recv(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            seen.append(msg)
            if done(msg):
                break
        return seen

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> RawSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
