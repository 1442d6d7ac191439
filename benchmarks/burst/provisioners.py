"""The burst through gateway_provisioners' launcher: the ``gateway`` and ``cluster`` conditions.

Kernels are started the way a cluster starts them: kernelspecs made by gateway_provisioners'
``jupyter-ssh-spec install`` (the default kernel class for stock ipykernel,
``--ipykernel-subclass-name ipykernel_ext.kernel.ExtKernel`` for ours), launched by its
DistributedProvisioner with CurveZMQ required. For a host that is this machine the
provisioner skips SSH and runs the same ``launch_ipykernel.py`` (stock ``IPKernelApp``) a
remote host runs.

* ``gateway``: a real jupyter_server starts them (its default settings), the reader is a
  websocket client, as in JupyterLab;
* ``cluster:SETTING[:SEND_TIMEOUT_MS]``: the process that launched the kernel reads IOPub
  through ``BlockingKernelClient``, as a notebook server does, with ``GP_SOCKET_TIMEOUT``
  set to SETTING (``default`` leaves it unset: 0.01 s, the provisioner's response socket
  then blocks the launching process's event loop for 10 ms each turn, docs/CLUSTER.md).
  gateway_provisioners reads that variable when it is imported, so each trial runs in a
  child process (``python -m benchmarks.burst.provisioners``, one JSON line out). With
  SEND_TIMEOUT_MS, ipykernel_ext reads ``c.ExtKernel.iopub_send_timeout`` from an IPython
  profile, as on a cluster host (the row applies to ipykernel_ext only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from benchmarks.burst.conditions import Condition, Settings, ThroughServer, Trial, outcome
from benchmarks.burst.outcome import Load, Outcome
from benchmarks.burst.readers import client_stats, read_client
from benchmarks.trials import EXT, STOCK
from harness.kernels import EXT_KERNEL_CLASS, install_ssh_spec, new_client, start_kernel
from harness.server import JupyterServer

#: gateway_provisioners refuses root unless told which users to refuse instead.
UNAUTHORIZED = {"GP_UNAUTHORIZED_USERS": "ipykernel-ext-bench-nobody"}


def make_specs(prefix: Path, send_timeout_ms: int | None = None) -> dict[str, str]:
    """A DistributedProvisioner kernelspec per kernel, made by the real CLI: {kernel: spec}."""
    specs = {}
    for kernel_name, kernel_class in ((STOCK, None), (EXT, EXT_KERNEL_CLASS)):
        name = f"ssh_{kernel_name.replace('-', '_')}"
        spec_file, spec = install_ssh_spec(prefix, name, kernel_class=kernel_class)
        spec["argv"][0] = sys.executable  # `python` on a host's PATH; here this environment's
        if send_timeout_ms is not None and kernel_class is not None:
            profile = prefix / "ipython" / "profile_default"
            profile.mkdir(parents=True, exist_ok=True)
            (profile / "ipython_kernel_config.py").write_text(
                f"c.ExtKernel.iopub_send_timeout = {send_timeout_ms}\n"
            )
            spec["env"] = {"IPYTHONDIR": str(profile.parent)}
        spec_file.write_text(json.dumps(spec, indent=1))
        specs[kernel_name] = name
    return specs


@contextlib.contextmanager
def spec_prefix(send_timeout_ms: int | None = None) -> Iterator[tuple[Path, dict[str, str]]]:
    """A temporary prefix with the kernelspecs; removed on exit."""
    prefix = Path(tempfile.mkdtemp(prefix="burst-gp-"))
    try:
        yield prefix, make_specs(prefix, send_timeout_ms)
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


@dataclass
class Gateway(ThroughServer):
    """A jupyter_server that starts the kernels through DistributedProvisioner."""

    specs: dict[str, str] | None = None

    def spec(self, kernel_name: str) -> str:
        assert self.specs is not None
        return self.specs[kernel_name]

    @contextlib.contextmanager
    def opened(self, settings: Settings) -> Iterator[Trial]:
        # Only the root refusal is lifted; GP_SOCKET_TIMEOUT keeps its default.
        with spec_prefix() as (prefix, self.specs):
            self.env = {**UNAUTHORIZED, "JUPYTER_PATH": str(prefix / "share" / "jupyter")}
            with killing_leftovers(JupyterServer(env=self.env)) as server:
                yield lambda kernel_name, load: self.trial(server, settings, kernel_name, load)


@contextlib.contextmanager
def killing_leftovers(server: JupyterServer) -> Iterator[JupyterServer]:
    """``server`` started; the provisioner's listeners killed before it stops (they outlive
    their kernels, docs/CLUSTER.md)."""
    with server:
        assert server.proc is not None
        try:
            yield server
        finally:
            for proc in psutil.Process(server.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    proc.kill()


@dataclass
class Cluster(Condition):
    """The launching process reads; ``GP_SOCKET_TIMEOUT`` as given, in a child per trial."""

    name: str
    setting: str = "default"
    send_timeout_ms: int | None = None

    def applies_to(self, kernel_name: str) -> bool:
        return self.send_timeout_ms is None or kernel_name == EXT

    @contextlib.contextmanager
    def opened(self, settings: Settings) -> Iterator[Trial]:
        env = dict(os.environ, **UNAUTHORIZED)
        env.pop("GP_SOCKET_TIMEOUT", None)
        if self.setting != "default":
            env["GP_SOCKET_TIMEOUT"] = self.setting
        with spec_prefix(self.send_timeout_ms) as (prefix, specs):

            def trial(kernel_name: str, load: Load) -> Outcome:
                child = subprocess.run(
                    [
                        *(sys.executable, "-m", "benchmarks.burst.provisioners"),
                        *(f"--kernels={prefix / 'share' / 'jupyter' / 'kernels'}",),
                        *(f"--spec={specs[kernel_name]}", f"--kernel={kernel_name}"),
                        *(f"--condition={self.name}", f"--load={load.label}"),
                        f"--timeout={settings.timeout}",
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=settings.timeout + 300,
                    check=False,
                )
                lines = [ln for ln in child.stdout.splitlines() if ln.startswith("{")]
                if child.returncode != 0 or not lines:
                    raise RuntimeError(f"the cluster trial failed: {child.stderr[-3000:]}")
                return Outcome(**json.loads(lines[-1]))

            yield trial


def child_trial(argv: list[str] | None = None) -> None:
    """One cluster trial in this process (see :class:`Cluster`); its Outcome as JSON."""
    from jupyter_client.kernelspec import KernelSpecManager

    parser = argparse.ArgumentParser()
    for option in ("--kernels", "--spec", "--kernel", "--condition", "--load"):
        parser.add_argument(option, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    load = Load.parse(args.load)
    ksm = KernelSpecManager(kernel_dirs=[args.kernels])
    km = start_kernel(args.spec, kernel_spec_manager=ksm)  # CurveZMQ required
    listeners = psutil.Process(km.provisioner.pid).children()  # type: ignore[union-attr]  # a DistributedProvisioner's; the base has no pid
    kc = None
    try:
        kc = new_client(km)
        read = read_client(kc, load, args.timeout)
        stats = client_stats(kc, args.kernel == EXT)
    finally:
        if kc is not None:
            kc.stop_channels()
        km.shutdown_kernel(now=True)
        for proc in listeners:  # left behind by shutdown_kernel(now=True)
            if proc.is_running():
                proc.kill()
        Path(km.provisioner.kernel_log).unlink(missing_ok=True)  # type: ignore[union-attr]  # a DistributedProvisioner's; the base has no kernel_log
    print(json.dumps(asdict(outcome(args.condition, args.kernel, load, read, stats))), flush=True)


if __name__ == "__main__":
    child_trial()
