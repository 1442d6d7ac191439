"""MainShellStatus: a "busy again" published beside the main shell never follows the cell's idle.

After an ``idle`` from control or a subshell, ``ExtKernel._publish_status`` publishes a
``busy`` for the cell the main shell runs. A thread deciding between the main shell's publish
of the cell's ``idle`` and its record of it published that ``busy`` after the ``idle`` (the
kernel then showed busy until its next status); both are now one step each
(``main_shell_published`` / ``idle_published_beside``). The test makes the other thread decide
exactly between the main shell's publish and record.
"""

from __future__ import annotations

import threading

from jupyter_client.session import Session

from ipykernel_ext.kernel.busy.main_shell_status import MainShellStatus

HANG = 10.0  # hang guard only


def test_no_busy_again_after_the_cells_idle() -> None:
    status = MainShellStatus()
    cell = Session(key=b"k").msg("execute_request", {"code": "1"})
    # Another client's request answered beside the cell: followed by busy while it runs.
    other = Session(key=b"k").msg("kernel_info_request", {})
    status.record("busy", cell)
    assert status.busy_again_after(other, "control") is cell

    wire: list[tuple[str, str]] = []
    deciding = threading.Event()

    def beside() -> None:
        deciding.set()  # from here it reads what the main shell recorded
        status.idle_published_beside(
            other, "control", lambda running: wire.append(("busy", running["header"]["msg_id"]))
        )

    thread = threading.Thread(target=beside)

    def publish_idle() -> None:
        thread.start()
        assert deciding.wait(HANG)  # the other thread decides now, before the record
        wire.append(("idle", cell["header"]["msg_id"]))

    status.main_shell_published("idle", cell, publish_idle)
    thread.join(HANG)
    assert not thread.is_alive()
    assert wire == [("idle", cell["header"]["msg_id"])]  # no busy after it
    assert not status.busy


def test_busy_again_while_the_cell_runs() -> None:
    """Decided while the cell runs (the main shell published nothing meanwhile): published."""
    status = MainShellStatus()
    cell = Session(key=b"k").msg("execute_request", {"code": "1"})
    other = Session(key=b"k").msg("kernel_info_request", {})
    published: list[str] = []
    status.main_shell_published("busy", cell, lambda: published.append("busy cell"))
    status.idle_published_beside(other, "control", lambda r: published.append("busy again"))
    assert published == ["busy cell", "busy again"] and status.running is cell
