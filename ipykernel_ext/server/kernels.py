"""What this server process keeps per kernel: its shared channel set and its outputs owner.

The registries, one of each per server process, are this module's: :data:`channel_sets` and
:data:`outputs_owners`. jupyter_server makes a connection object per websocket, and what a
kernel has must be found by every websocket of the kernel, of either connection class (a
server runs one), and outlive each: a reloaded page finds the channels again, and the owner
writes a cell once its tab has left. Only the server's event loop touches them (websocket
handlers, restart callbacks, jupyter_events listeners, the sets' own timers), so they take
no lock.

* :class:`KernelChannels`: kernel id -> its open :class:`~ipykernel_ext.shared_channels.
  SharedChannels`; found again by every websocket of the kernel, moved to the new ports when
  the kernel restarted on other ones, told of every restart (the restarter's and the API's),
  forgotten once closed; the server's shutdown closes them
  (``SharedChannelsConnection.close_all``);
* :class:`OutputsOwners`: kernel id -> its :class:`~.outputs.OutputsOwner` (the cells whose
  outputs the server keeps), told of restarts and shutdowns made through the server's API
  (an owner goes with its kernel's shutdown) and of notebooks renamed;
* :func:`status_rule` and :func:`server_context`: what a new set takes from the server (which
  statuses set a kernel's ``execution_state``; the server's own zmq context).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import zmq
import zmq.asyncio

from ..protocol import UNTRACKED_MESSAGE_TYPES
from ..shared_channels import SharedChannels
from .outputs import OutputsOwner

#: jupyter_server's event for kernel actions through its API (``emit_kernel_action_event``:
#: ``action`` is the method's name without ``_kernel``, "restart" or "shutdown").
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"
#: jupyter_server's ContentsManager events: a rename (or move) names the old and new path.
CONTENTS_ACTIONS = "https://events.jupyter.org/jupyter_server/contents_service/v1"

#: ``make(on_close)``: a new set for the kernel, not started, calling ``on_close`` once closed.
MakeChannels = Callable[[Callable[[SharedChannels], None]], SharedChannels]


class KernelChannels:
    """The open shared channel set of each kernel (one per kernel in this server process)."""

    def __init__(self) -> None:
        self._by_kernel: dict[str, SharedChannels] = {}
        #: the event loggers listened to (weakly, as :class:`OutputsOwners`)
        self._listening: weakref.WeakSet[Any] = weakref.WeakSet()

    def get(
        self,
        kernel_id: str,
        info: dict[str, Any],
        make: MakeChannels,
        multi_kernel_manager: Any,
    ) -> SharedChannels:
        """The kernel's open set, else a new one from ``make``, started.

        ``info`` is the kernel's connection info now: a set on other ports (the kernel
        restarted on new ones) is reconnected, so every websocket of the kernel moves along.
        A new set is told of the restarter's restarts (the API's come as kernel action
        events, :meth:`listen`): after either, the next websocket waits for the new process.
        """
        shared = self.find(kernel_id)
        if shared is not None:
            shared.follow(info)
            return shared

        def forget(closed: SharedChannels) -> None:
            if kernel_id in multi_kernel_manager:  # a kernel shut down took its restarter
                multi_kernel_manager.remove_restart_callback(kernel_id, closed.kernel_restarted)
            if self._by_kernel.get(kernel_id) is closed:
                del self._by_kernel[kernel_id]

        shared = make(forget)
        shared.start()
        multi_kernel_manager.add_restart_callback(kernel_id, shared.kernel_restarted)
        self._by_kernel[kernel_id] = shared
        return shared

    def listen(self, event_logger: Any) -> None:
        """Learn of restarts through the API (jupyter_server's kernel action events)."""
        if event_logger is None or event_logger in self._listening:
            return
        self._listening.add(event_logger)
        event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        # Nothing is awaited before the set hears it: the listener's task runs before the
        # server reads the next request (a new websocket after the restart's reply).
        if data.get("status") != "success" or data.get("action") != "restart":
            return
        shared = self.find(data.get("kernel_id", ""))
        if shared is not None:
            shared.kernel_restarted()

    def find(self, kernel_id: str) -> SharedChannels | None:
        """The kernel's open set, if it has one (nothing is made)."""
        shared = self._by_kernel.get(kernel_id)
        return shared if shared is not None and not shared.closed else None

    def __iter__(self) -> Iterator[SharedChannels]:
        return iter(list(self._by_kernel.values()))

    async def aclose_all(self) -> None:
        for shared in self:
            await shared.aclose()


class OutputsOwners:
    """The owner of each kernel of this server process, and the server's kernel actions."""

    def __init__(self) -> None:
        self._by_kernel: dict[str, OutputsOwner] = {}
        #: the event loggers listened to (weakly: a logger freed is forgotten with it, so no
        #: new one is ever taken for it)
        self._listening: weakref.WeakSet[Any] = weakref.WeakSet()

    def get(
        self, kernel_id: str, make: Callable[[], OutputsOwner], multi_kernel_manager: Any
    ) -> OutputsOwner:
        """The kernel's owner; a new one (from ``make``) is told of the restarter's restarts
        and deaths (the API's come as kernel action events, :meth:`listen`)."""
        owner = self.find(kernel_id)
        if owner is None:
            owner = self._by_kernel[kernel_id] = make()
            multi_kernel_manager.add_restart_callback(
                kernel_id, lambda: owner.kernel_ended("restart")
            )
            multi_kernel_manager.add_restart_callback(
                kernel_id, lambda: owner.kernel_ended("dead"), "dead"
            )
        return owner

    def find(self, kernel_id: str) -> OutputsOwner | None:
        """The kernel's owner, if it has one (nothing is made)."""
        return self._by_kernel.get(kernel_id)

    def __iter__(self) -> Iterator[OutputsOwner]:
        return iter(list(self._by_kernel.values()))

    def listen(self, event_logger: Any) -> None:
        """Learn of restarts and shutdowns through the API (jupyter_server's kernel action
        events; the restarter's own restarts come as restart callbacks), and of notebooks
        renamed or moved through the ContentsManager (its contents events), so the outputs
        follow the notebook."""
        if event_logger is None or event_logger in self._listening:
            return
        self._listening.add(event_logger)
        event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)
        event_logger.add_listener(schema_id=CONTENTS_ACTIONS, listener=self._on_contents_action)

    async def _on_contents_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        if data.get("action") != "rename" or not data.get("source_path"):
            return
        for owner in self:
            owner.renamed(str(data["source_path"]), str(data.get("path", "")))

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        if data.get("status") != "success":
            return
        owner = self.find(data.get("kernel_id", ""))
        if owner is None:
            return
        if data.get("action") == "restart":
            owner.kernel_ended("restart")
        elif data.get("action") == "shutdown":
            owner.kernel_ended("dead")
            del self._by_kernel[owner.kernel_id]
            await owner.drain()
            owner.close()


#: kernel id -> its open shared channel set (module docstring: why one per server process).
channel_sets = KernelChannels()
#: kernel id -> its outputs owner (the same).
outputs_owners = OutputsOwners()


def status_rule(multi_kernel_manager: Any) -> Callable[[Any], bool]:
    """jupyter_server's rule for which statuses set a kernel's ``execution_state``."""
    track = getattr(multi_kernel_manager, "track_message_type", None)
    if callable(track):
        return track
    # A manager without the method: its own configured list if it has one, else
    # jupyter_server's default (our copy, which tests/package/test_contract.py checks against it).
    # Not the trait's ``default_value``: traitlets leaves it Undefined for this List (the
    # default is made per instance), and Undefined cannot be iterated (TypeError).
    configured = getattr(multi_kernel_manager, "untracked_message_types", None)
    untracked = frozenset(UNTRACKED_MESSAGE_TYPES if configured is None else configured)
    return lambda parent_type: parent_type not in untracked


def server_context(multi_kernel_manager: Any) -> zmq.asyncio.Context | None:
    """The server's own zmq context, as an asyncio one (None: the channels make theirs).

    One I/O thread for every kernel rather than a second one; the multi-kernel manager's
    context lives as long as the server.
    """
    context = getattr(multi_kernel_manager, "context", None)
    if isinstance(context, zmq.asyncio.Context):
        return context
    if isinstance(context, zmq.Context) and not context.closed:
        return zmq.asyncio.Context.shadow(context.underlying)
    return None
