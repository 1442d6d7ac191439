"""A kernel launched to outlive its server ends itself once nobody listens and it runs
nothing (ipykernel_ext.kernel.orphan), and only then.

A real kernel through ``jupyter_client.KernelManager`` with CurveZMQ required and the
orphan time-out in its environment (as the server's provisioner launches it), shortened to
1 s. Each "still alive" check waits three time-outs first: a lower bound, so a slower
machine only makes it stricter. The ends are waited for with a hang guard.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jupyter_client.provisioning import LocalProvisioner

from harness.kernels import EXT_KERNEL, new_client, start_kernel
from harness.polling import wait_until
from ipykernel_ext.kernel.orphan import ENV

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 1.0
#: Three time-outs, and the watch's own look (0.5 s) twice over.
STILL = 3 * TIMEOUT + 1.0
HANG = 60


def test_a_listener_or_a_running_cell_keeps_it_then_it_ends(tmp_path: Path) -> None:
    km = start_kernel(EXT_KERNEL, env={**os.environ, ENV: repr(TIMEOUT)})
    try:
        kc = new_client(km)
        with pytest.raises(TimeoutError):  # a subscriber (this client): it stays
            wait_until(lambda: not km.is_alive(), STILL, "nothing")
        go = tmp_path / "go"
        # An awaiting cell: the kernel's event loop runs meanwhile, so only the watch's
        # own rule (a running cell keeps the kernel) stops it ending the kernel now.
        msg_id = kc.execute(
            "import asyncio\nfrom pathlib import Path\n"
            f"while not Path({str(go)!r}).exists():\n    await asyncio.sleep(0.01)\n"
        )
        while True:  # the cell's busy: it runs
            msg = kc.get_iopub_msg(timeout=HANG)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
                break
        kc.stop_channels()  # nobody listens now, but the cell runs: it stays
        with pytest.raises(TimeoutError):
            wait_until(lambda: not km.is_alive(), STILL, "nothing")
        go.touch()  # the cell ends: now the time-out runs, and the kernel ends itself
        wait_until(lambda: not km.is_alive(), HANG, "the orphaned kernel's end")
        provisioner = km.provisioner
        assert isinstance(provisioner, LocalProvisioner) and provisioner.process is not None
        assert provisioner.process.returncode == 0  # its normal exit, not a kill
    finally:
        km.shutdown_kernel(now=True)
