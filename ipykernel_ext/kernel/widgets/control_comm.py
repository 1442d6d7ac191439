"""ipywidgets' control comm answered with our snapshot: the snapshot, and an idle kernel's comm.

A frontend loading a notebook opens ipywidgets' control comm (``comm_open`` to
``jupyter.widget.control``) and asks ``{"method": "request_states"}``; ipywidgets answers
``update_states`` with every model. This module owns:

* :func:`update_states`: that reply's data and buffers, built by
  :mod:`ipykernel_ext.kernel.widgets.snapshot` (ipywidgets' states, the fast way). The one
  snapshot both paths send: mid-cell, from :class:`~ipykernel_ext.kernel.busy.answers.BusyAnswers`
  (read on a worker of the shell-channel thread), and on an idle kernel, here;
* on an idle kernel the control comm is ipywidgets' own, opened by the main shell as on stock:
  :meth:`IdleControlComms.wrap_comm_open` then installs a :class:`ControlCommAnswer` as its
  message callback, which answers ``request_states`` with :func:`update_states` on the main
  shell, in stock's order, and leaves everything else to ipywidgets' handler.

The switch (``ExtKernel.answer_while_busy``) is read at each message: off, ipywidgets answers.
Both classes run on the thread that handles the comm messages (the main shell's; a subshell's
with ``ExtKernel.comms_on_subshells``) and keep nothing that changes after they are made.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...protocol import CONTROL_COMM_TARGET
from .snapshot import build_widget_state_reply, widget_module

#: The control comm's two methods (ipywidgets' ``Widget._handle_control_comm_msg``): a
#: frontend's request, and the kernel's reply with every model's state.
REQUEST_STATES = "request_states"
UPDATE_STATES = "update_states"


def update_states(log: Any) -> tuple[dict[str, Any], list[Any]]:
    """ipywidgets' ``update_states`` comm data for every widget, and its buffers.

    The states, buffer paths and buffers of ipywidgets' own reply, in its registry order.
    A widget whose state cannot be read is left out with a warning in ``log`` (ipywidgets'
    handler would raise and send nothing at all).
    """
    reply, buffers = build_widget_state_reply({}, log)
    for model_id, error in reply["errors"].items():
        log.warning("Widget %s left out of update_states: %s", model_id, error)
    data = {
        "method": UPDATE_STATES,
        "states": reply["states"],
        "buffer_paths": reply["buffer_paths"],
    }
    return data, buffers


class IdleControlComms:
    """Gives the control comms the main shell opens our ``request_states`` answer.

    ``comm_manager`` is the kernel's; ``enabled`` says whether the switch is on now.
    """

    def __init__(self, comm_manager: Any, log: Any, enabled: Callable[[], bool]) -> None:
        self.comm_manager = comm_manager
        self.log = log
        self.enabled = enabled

    def wrap_comm_open(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Stock's ``comm_open`` shell handler, then :meth:`install_answer`.

        So the comm is opened, version-checked (or refused and closed) by ipywidgets exactly as
        on stock, on the thread and in the order stock handles it.
        """

        @functools.wraps(handler)
        def comm_open_then_answer(stream: Any, ident: list[bytes], msg: dict[str, Any]) -> Any:
            result = handler(stream, ident, msg)
            if self.enabled():
                try:
                    self.install_answer(msg)
                except Exception:
                    self.log.error("Widget control comm left to ipywidgets:", exc_info=True)
            return result

        return comm_open_then_answer

    def install_answer(self, msg: dict[str, Any]) -> bool:
        """After stock opened ``msg``'s comm: answer its ``request_states`` with our snapshot.

        Only a ``jupyter.widget.control`` comm that ipywidgets accepted and gave its own
        handler (``Widget._handle_control_comm_msg``): the handler is swapped for a
        :class:`ControlCommAnswer`, which keeps ipywidgets' for everything else. Returns
        whether it was installed.
        """
        content = msg.get("content")
        if not isinstance(content, dict) or content.get("target_name") != CONTROL_COMM_TARGET:
            return False
        module = widget_module()
        comm_id = content.get("comm_id")
        comm = self.comm_manager.comms.get(comm_id) if isinstance(comm_id, str) else None
        if module is None or comm is None or not isinstance(comm_id, str):
            return False  # no ipywidgets, or refused (another major version): stock's answer
        theirs = module.Widget._handle_control_comm_msg
        if getattr(comm, "_msg_callback", None) != theirs:
            return False  # someone else's control target: theirs to answer
        comm.on_msg(ControlCommAnswer(self, comm_id, theirs))
        return True


class ControlCommAnswer:
    """The message callback of a control comm the main shell opened (an idle kernel's).

    Called where ipywidgets' ``_handle_control_comm_msg`` would be, by the comm's
    ``handle_msg`` (so the ``pre_execute``/``post_execute`` events, the comm manager's error
    logging and the ``busy``/``idle`` of the shell message stay stock's). ``request_states``
    gets :func:`update_states` through the comm's own ``send`` (ipywidgets' reply, built the
    fast way); any other message, and every message while ``ExtKernel.answer_while_busy`` is
    off, goes to ipywidgets' handler, which answers or raises as on stock.
    """

    def __init__(
        self, idle_comms: IdleControlComms, comm_id: str, theirs: Callable[[Any], Any]
    ) -> None:
        self.idle_comms = idle_comms
        self.comm_id = comm_id
        self.theirs = theirs

    def __call__(self, msg: dict[str, Any]) -> Any:
        data = msg["content"].get("data")
        idle_comms, log = self.idle_comms, self.idle_comms.log
        if (
            not idle_comms.enabled()
            or not isinstance(data, dict)
            or data.get("method") != REQUEST_STATES
        ):
            return self.theirs(msg)
        # Held by the comm manager, not by this callback (no comm <-> callback cycle).
        comm = idle_comms.comm_manager.comms.get(self.comm_id)
        if comm is None:
            return None
        try:
            reply, buffers = update_states(log)
        except Exception:
            log.warning("update_states: snapshot failed; ipywidgets answers", exc_info=True)
            return self.theirs(msg)
        # ipywidgets replies on the last control comm opened (Widget._control_comm); this one
        # replies to the comm that asked (PROTOCOL.md section 5).
        comm.send(reply, buffers=buffers)
        return None
