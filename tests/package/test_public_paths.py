"""Every name a user types keeps working, imported from a fresh interpreter.

These paths are written into kernelspecs, cluster images, server config and scripts
(README.md, docs/CLUSTER.md, PROTOCOL.md "Names"); moving a module must not break them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PUBLIC = [
    "ipykernel_ext.kernel.ExtKernel",  # --kernel-class-name, kernel_class=, embed_kernel
    "ipykernel_ext.kernel.ExtKernelApp",
    "ipykernel_ext.kernel.handle_waiting_comms",  # a blocking cell lets widget events through
    "ipykernel_ext.server.SharedChannelsConnection",  # kernel_websocket_connection_class
    "ipykernel_ext.server.GatewayOutputsConnection",  # the same, with --gateway-url
    "ipykernel_ext.server.KeepOutputs",  # c.KeepOutputs.keep_outputs (config of both)
    # jpserver_extensions {"ipykernel_ext": ...} (jupyter_server_config.d/ipykernel_ext.json)
    "ipykernel_ext._jupyter_server_extension_points",
    "ipykernel_ext.server.extension._load_jupyter_server_extension",
    "ipykernel_ext.shared_channels.SharedChannels",
    "ipykernel_ext.client.is_own_echo",
    "ipykernel_ext.client.fetch_widget_states",
    "ipykernel_ext.client.async_fetch_widget_states",
    "ipykernel_ext.client.WidgetStateError",
    "ipykernel_ext.client.RouterClient",
    "ipykernel_ext.client.KernelUnreachable",
    "ipykernel_ext.install.InstallExtKernelSpecApp",  # the install subcommand
    "ipykernel_ext.demo.DemoApp",  # the demo subcommand
]


@pytest.mark.parametrize("path", PUBLIC)
def test_public_path_imports_in_a_fresh_interpreter(path: str) -> None:
    module, name = path.rsplit(".", 1)
    code = f"import importlib; getattr(importlib.import_module({module!r}), {name!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_launcher_runs_as_users_type_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipykernel_ext", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "ipykernel" in proc.stdout, proc.stdout + proc.stderr
