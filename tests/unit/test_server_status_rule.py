"""status_rule: which statuses set a kernel's execution_state, on any multi-kernel manager.

jupyter_server's ``MappingKernelManager.track_message_type`` is the rule; a manager without it
gets its own ``untracked_message_types`` list, else jupyter_server's default
(``protocol.UNTRACKED_MESSAGE_TYPES``): never the trait's ``default_value``, which traitlets
leaves Undefined for that List (making the shared channels would raise TypeError).
"""

from __future__ import annotations

import pytest

pytest.importorskip("jupyter_server")

from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

from ipykernel_ext.protocol import UNTRACKED_MESSAGE_TYPES
from ipykernel_ext.server.kernels import status_rule


def test_the_servers_own_rule() -> None:
    manager = MappingKernelManager(untracked_message_types=["execute_request"])
    track = status_rule(manager)
    assert not track("execute_request") and track("kernel_info_request")


class ListOnly:
    """A manager with the list and without ``track_message_type``."""

    def __init__(self, untracked: list[str]) -> None:
        self.untracked_message_types = untracked


def test_a_manager_without_track_message_type_uses_its_list() -> None:
    track = status_rule(ListOnly(["execute_request"]))
    assert not track("execute_request") and track("kernel_info_request")


def test_a_manager_with_neither_uses_jupyter_servers_default() -> None:
    track = status_rule(object())
    assert track("execute_request")
    assert not any(track(t) for t in UNTRACKED_MESSAGE_TYPES)
    assert frozenset(MappingKernelManager().untracked_message_types) == UNTRACKED_MESSAGE_TYPES
