"""A real Jupyter Enterprise Gateway in a subprocess, for the gateway-mode tests.

Enterprise Gateway pins old Jupyter packages (jupyter_server 1.x, jupyter_client 6), so it
lives in a venv of its own: ``.venv-eg`` at the checkout's root (``.ci/run`` makes it:
``python3 -m venv .venv-eg && .venv-eg/bin/pip install jupyter-enterprise-gateway``), or the
one ``IPYKERNEL_EXT_EG_VENV`` names. :func:`gateway_command` says why not when there is none
(a test skips with that reason).

Its kernels are launched as a cluster operator has them: kernelspecs made by
gateway_provisioners' ``jupyter-ssh-spec install`` (its assembled ``launch_ipykernel.py``,
``--kernel-class-name ipykernel_ext.kernel.ExtKernel`` for ``eg_ext``, the launcher's default
stock ipykernel for ``eg_stock``), turned into Enterprise Gateway's own form: the
``DistributedProcessProxy`` with ``localhost`` as the one remote host (Enterprise Gateway then
launches without SSH), and this environment's Python. The kernels run here, in this venv (the
project's), as on a cluster host that has the project installed.

Use::

    with EnterpriseGateway() as gateway:
        server = JupyterServer(extra_args=[f"--gateway-url={gateway.url}"])
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .kernels import EXT_KERNEL_CLASS, install_ssh_spec
from .logged_process import LoggedProcess

ROOT = Path(__file__).resolve().parent.parent

#: The kernelspecs the gateway offers: ours, and stock ipykernel by the same launcher.
EG_EXT = "eg_ext"
EG_STOCK = "eg_stock"

DISTRIBUTED = "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy"


def gateway_venv() -> Path:
    return Path(os.environ.get("IPYKERNEL_EXT_EG_VENV") or ROOT / ".venv-eg")


def gateway_command() -> list[str] | str:
    """The command that starts Enterprise Gateway, or why there is none here."""
    exe = gateway_venv() / "bin" / "jupyter-enterprisegateway"
    if not exe.exists():
        return (
            f"Jupyter Enterprise Gateway not installed at {exe} (it needs its own venv: "
            "python3 -m venv .venv-eg && .venv-eg/bin/pip install jupyter-enterprise-gateway; "
            ".ci/run makes it)"
        )
    return [str(exe)]


#: Enterprise Gateway's line once it listens, with the port it took.
AVAILABLE = re.compile(r"Jupyter Enterprise Gateway \S+ is available at https?://[^\s:/]+:(\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_kernelspecs(prefix: Path) -> Path:
    """``eg_ext`` and ``eg_stock`` in ``prefix``/share/jupyter/kernels; returns that folder."""
    for name, kernel_class in ((EG_EXT, EXT_KERNEL_CLASS), (EG_STOCK, None)):
        spec_file, spec = install_ssh_spec(prefix, name, kernel_class=kernel_class)
        argv = list(spec["argv"])
        # Enterprise Gateway 3.3 fills no {transport_encryption} (gateway_provisioners does).
        if "--transport-encryption" in argv:
            i = argv.index("--transport-encryption")
            del argv[i : i + 2]
        argv[0] = sys.executable  # the project's environment, as a cluster host's python
        spec.update(
            argv=argv,
            display_name=f"Python ({name}, Enterprise Gateway)",
            metadata={"process_proxy": {"class_name": DISTRIBUTED}},
        )
        spec.pop("kernel_protocol_version", None)
        spec_file.write_text(json.dumps(spec, indent=1))
    return prefix / "share" / "jupyter" / "kernels"


class EnterpriseGateway(LoggedProcess):
    """``jupyter enterprisegateway`` on a free port of 127.0.0.1, with the two kernelspecs.

    ``EG_LIST_KERNELS=True`` (JupyterLab lists the gateway's kernels), no unauthorized user
    (CI runs as root, which Enterprise Gateway refuses by default), the kernels' response
    address on 127.0.0.1. Its log is ``self.log_path``; stopped by SIGTERM (it shuts its
    kernels down), killed after 30 s.
    """

    def __init__(self, startup_timeout: float = 90) -> None:
        executable = gateway_command()
        if isinstance(executable, str):
            raise RuntimeError(executable)
        super().__init__(tmp_prefix="ipykernel-ext-eg-", log_name="gateway.log", stop_timeout=30)
        self.executable = executable
        self.startup_timeout = startup_timeout
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            *self.executable,
            "--EnterpriseGatewayApp.ip=127.0.0.1",
            f"--EnterpriseGatewayApp.port={self.port}",
            "--EnterpriseGatewayApp.remote_hosts=localhost",
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON"))}
        kernels = make_kernelspecs(self._tmp / "prefix")
        for name in ("config", "data", "runtime"):
            (self._tmp / name).mkdir(exist_ok=True)
        env.update(
            JUPYTER_PATH=str(kernels.parent),
            JUPYTER_CONFIG_DIR=str(self._tmp / "config"),
            JUPYTER_DATA_DIR=str(self._tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(self._tmp / "runtime"),
            EG_LIST_KERNELS="True",
            EG_UNAUTHORIZED_USERS="",
            EG_RESPONSE_IP="127.0.0.1",
            EG_RESPONSE_PORT=str(_free_port()),
            PYTHONUNBUFFERED="1",
        )
        return env

    def wait_until_up(self) -> None:
        """Until it says where it listens, then lists both kernelspecs there. The port it
        was given was free a moment before: when another process bound it first (another test
        worker's kernel, say), Enterprise Gateway tries others and says which one it took."""
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        listening = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Enterprise Gateway exited:\n{self.log_tail()}")
            if listening is None:
                listening = AVAILABLE.search(self.log_text())
                if listening is not None:
                    self.port = int(listening.group(1))
                    self.url = f"http://127.0.0.1:{self.port}"
            if listening is not None and self._lists_both_kernelspecs():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Enterprise Gateway not up in {self.startup_timeout} s")
            time.sleep(0.2)

    def _lists_both_kernelspecs(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/kernelspecs", timeout=5) as r:
                specs = json.load(r)["kernelspecs"]
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return False
        return {EG_EXT, EG_STOCK} <= specs.keys()

    def kernel_model(self, kernel_id: str) -> dict[str, Any]:
        """``GET /api/kernels/<id>`` of the gateway itself (``connections``: its websockets)."""
        with urllib.request.urlopen(f"{self.url}/api/kernels/{kernel_id}", timeout=30) as r:
            model: dict[str, Any] = json.load(r)
        return model

    def shutdown_kernel(self, kernel_id: str) -> None:
        """``DELETE /api/kernels/<id>`` of the gateway itself: a kernel no server knows."""
        request = urllib.request.Request(f"{self.url}/api/kernels/{kernel_id}", method="DELETE")
        with urllib.request.urlopen(request, timeout=60):
            pass
