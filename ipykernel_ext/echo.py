"""comm_echo (stub, being written)."""
from __future__ import annotations
from typing import Any
from traitlets import Bool


class CommEcho:
    def __init__(self, *, session: Any, iopub_socket: Any, topic: bytes, comm_manager: Any,
                 log: Any, enabled: bool, exclude_targets: Any) -> None:
        if not comm_manager.has_trait("echo_enabled"):
            comm_manager.add_traits(echo_enabled=Bool(enabled))
        self.exclude_targets = frozenset(exclude_targets)

    def wrap(self, handler: Any) -> Any:
        return handler
