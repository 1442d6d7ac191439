"""ExtShell: ipykernel's ``ZMQInteractiveShell`` with the comm path's cell events.

Named as ipykernel names its shell's module (``ipykernel.zmqshell``), where a reader looks for
the shell; ``ExtKernel.shell_class``. The one change is its ``EventManager``:
:class:`~.comms.cell_events.CellEvents`, which holds a cell's ``pre_execute``/``post_execute``
while a comm message is handled in the middle of it.
"""

from __future__ import annotations

from ipykernel.zmqshell import ZMQInteractiveShell
from IPython.core.events import available_events

from .comms.cell_events import CellEvents


class ExtShell(ZMQInteractiveShell):
    """ipykernel's shell with :class:`~.comms.cell_events.CellEvents`."""

    def init_events(self) -> None:
        super().init_events()
        # Same callbacks (EventManager.__init__ made them; IPython registered its own), our trigger.
        events = CellEvents(self, available_events)
        events.callbacks = self.events.callbacks
        self.events = events
