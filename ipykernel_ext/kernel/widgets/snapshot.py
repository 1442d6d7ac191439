"""The snapshot of every ipywidgets model, for one reply, taken on whichever thread asks.

:func:`build_widget_state_reply` answers a ``widget_state_request`` (PROTOCOL.md section 3)
with the content and buffers of a ``widget_state_reply``. The states are exactly what
ipywidgets' own ``update_states`` reply (the ``jupyter.widget.control`` comm) carries, so a
frontend's existing loader can take them.

Three kinds of thread take snapshots, each while the others may: the control thread (a
``widget_state_request``), the worker threads of the shell-channel thread's event loop (the
``update_states`` answered mid-cell, :mod:`ipykernel_ext.kernel.busy.answers`) and the main
thread (the check after a mid-cell snapshot, :mod:`.reconcile`, and an idle kernel's control
comm, :mod:`.control_comm`, which runs where comm messages are handled: on a subshell's
thread with ``ExtKernel.comms_on_subshells``).

Thread safety. A snapshot is read while the main thread may be creating, changing and closing
widgets, so:

* ``ipywidgets`` is looked up in ``sys.modules`` and never imported here: importing it from
  the control thread would register comm targets on a thread that does not own them, and a
  kernel that never imported it has no widgets anyway;
* the registry of live widgets (``ipywidgets.widgets.widget._instances``) is copied in one
  C-level operation and the copy is iterated, never the live dict;
* each widget is read under its own ``try``: a widget closed or changed mid-read, or whose
  serializer raises, is reported in ``errors`` (and ``missing``) without losing the others;
* nothing here sends a comm message: no trait is set and no widget method that syncs is called
  (a send from the control thread would carry the control request as its parent);
* what the snapshots share is kept by two owners, each changed under its own lock: which
  reader is current (:class:`_CurrentReader`, made again when ipywidgets is reloaded) and that
  reader's plan cache and logged failures (:class:`~.reader.StateReader`). A plan, once made,
  is never changed; the widgets' states are read without any lock.

How a widget's state is read fast, and safely when that fails, is :mod:`.reader`'s.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from .reader import RETRIES, StateReader

#: The fields a ``widget_state_request`` may carry.
REQUEST_FIELDS = frozenset({"model_ids"})


_log = logging.getLogger(__name__)


class WidgetStateRequestError(ValueError):
    """A ``widget_state_request`` whose content does not follow PROTOCOL.md section 3."""


def parse_request(content: Any) -> list[str] | None:
    """The model ids asked for (``None`` for every model); raises on a malformed request."""
    if not isinstance(content, dict):
        raise WidgetStateRequestError(
            f"widget_state_request content must be an object, not {type(content).__name__}"
        )
    unknown = sorted(str(key) for key in content if key not in REQUEST_FIELDS)
    if unknown:
        raise WidgetStateRequestError(
            f"widget_state_request has unknown fields {unknown}; it takes only 'model_ids'"
        )
    if "model_ids" not in content:
        return None
    model_ids = content["model_ids"]
    if not isinstance(model_ids, list) or not all(isinstance(m, str) for m in model_ids):
        raise WidgetStateRequestError("widget_state_request 'model_ids' must be a list of strings")
    return list(dict.fromkeys(model_ids))  # in order, each id once


def build_widget_state_reply(
    content: Any, log: logging.Logger | logging.LoggerAdapter[Any] | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """The ``widget_state_reply`` content and its buffers for a request's ``content``.

    Content: ``status``, ``states`` (model id to ``model_name``, ``model_module``,
    ``model_module_version``, ``state``), ``buffer_paths`` (aligned with the returned buffers,
    each ``[model_id, "state", key, ...]``), ``missing`` (ids with no state in this reply:
    asked for and unknown, closed meanwhile, or failed) and ``errors`` (model id to
    ``{"ename", "evalue"}`` for the models whose state could not be read).

    Raises :class:`WidgetStateRequestError` for a malformed request (the kernel turns any exception
    into a standard error reply). ``log`` gets the once-per-class warning of a fast-path
    failure (default: this module's logger).
    """
    model_ids = parse_request(content)
    snapshot = _snapshot_instances()
    if model_ids is None:
        items = list(snapshot.items())
        missing: list[str] = []
    else:
        items = [(m, snapshot[m]) for m in model_ids if m in snapshot]
        missing = [m for m in model_ids if m not in snapshot]
    reader = _current_reader.get()
    states: dict[str, Any] = {}
    buffer_paths: list[list[Any]] = []
    buffers: list[Any] = []
    errors: dict[str, dict[str, str]] = {}
    if reader is not None:
        reader.read(items, states, buffer_paths, buffers, errors, missing, log or _log)
    reply = {
        "status": "ok",
        "states": states,
        "buffer_paths": buffer_paths,
        "missing": missing,
        "errors": errors,
    }
    return reply, buffers


def widget_module() -> Any:
    """ipywidgets' ``widget`` module if this kernel has imported it (whole), else None."""
    # A module that is still being imported on the main thread may lack the names yet.
    module = sys.modules.get("ipywidgets.widgets.widget")
    if module is None or not hasattr(module, "Widget") or not hasattr(module, "_instances"):
        return None
    return module


def _snapshot_instances() -> dict[str, Any]:
    """A private copy of ipywidgets' live-widget registry (empty without ipywidgets)."""
    module = widget_module()
    if module is None:
        return {}
    instances = module._instances
    for attempt in range(RETRIES):
        try:
            # dict.copy is one C call; it only fails if a finalizer run by the allocator
            # (Widget.__del__ closes the widget) mutates the registry mid-copy.
            return instances.copy() if type(instances) is dict else dict(instances)
        except RuntimeError:
            if attempt == RETRIES - 1:
                raise
    return {}  # pragma: no cover - the loop returns or raises


class _CurrentReader:
    """Which :class:`~.reader.StateReader` the snapshots use: one for the ipywidgets loaded now.

    Shared by every thread that takes a snapshot (see the module docstring). Read without
    the lock (one attribute); made, or made again for a reloaded ipywidgets, under it, so two
    threads never make two readers and lose one's plans and logged failures.
    """

    def __init__(self) -> None:
        self._reader: StateReader | None = None
        self._lock = threading.Lock()

    def get(self) -> StateReader | None:
        """The reader for the ipywidgets loaded now; None if the kernel has not imported it."""
        module = widget_module()
        if module is None:
            return None
        # Keyed on the Widget class: a reloaded ipywidgets brings new classes to plan for.
        reader = self._reader
        if reader is None or reader.widget_class is not module.Widget:
            with self._lock:
                reader = self._reader
                if reader is None or reader.widget_class is not module.Widget:
                    reader = self._reader = StateReader(module)
        return reader


_current_reader = _CurrentReader()
