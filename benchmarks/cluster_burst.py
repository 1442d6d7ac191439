"""The 3000-Button burst through gateway_provisioners' launcher: stock IPythonKernel vs ExtKernel.

The kernels are started the way a cluster starts them: kernelspecs made by
gateway_provisioners' ``jupyter-ssh-spec install`` (one with the default kernel class, two with
``--ipykernel-subclass-name ipykernel_ext.kernel.ExtKernel``: the default send timeout, and
``c.ExtKernel.iopub_send_timeout = 10000`` from an IPython profile), launched by its
DistributedProvisioner through ``jupyter_client.KernelManager`` with
``transport_encryption="required"``. For a host that is this machine the provisioner skips SSH
and runs the same ``launch_ipykernel.py`` (stock ``IPKernelApp``) a remote host runs.

Each trial: a fresh kernel, ``import ipywidgets``, then one cell that displays a GridBox of N
Buttons (3 N + 2 ``comm_open``, one ``display_data``, the idle). One client with a session of
its own reads IOPub through ``BlockingKernelClient.get_iopub_msg``, in the process that
launched the kernel, as a notebook server does. Kernels alternate trial by trial.

Two settings of ``GP_SOCKET_TIMEOUT`` (read by gateway_provisioners when it is imported, so
each runs in a child process of its own):

* ``default`` (0.01 s): the provisioner's response socket blocks the launching process's event
  loop for 10 ms each turn, so that process reads IOPub slowly (see docs/CLUSTER.md);
* ``0``: the event loop waits on the socket instead; the reader runs at full speed.

    python -m benchmarks cluster_burst                 # 3 trials per kernel and setting
    python -m benchmarks cluster_burst --quick         # 1 trial per kernel and setting
    python -m benchmarks cluster_burst --trials 5 --buttons 1000 --settings 0
    python -m benchmarks cluster_burst --only stock ipykernel_ext --json results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.burst import GridTrial, grid_counts, losses, run_grid
from benchmarks.trials import RESULTS, fmt, print_table
from harness.kernels import (
    EXT_KERNEL_CLASS,
    install_ssh_spec,
    iopub_stats,
    new_client,
    start_kernel,
)

TRIALS, QUICK_TRIALS = 3, 1
RESULTS_FILE = RESULTS / "cluster_burst.json"
#: name -> (kernel class, ExtKernel.iopub_send_timeout in ms or None for the default)
KERNELS: dict[str, tuple[str | None, int | None]] = {
    "stock": (None, None),
    "ipykernel_ext": (EXT_KERNEL_CLASS, None),
    # A send timeout long enough for a reader slowed down by the provisioner (docs/CLUSTER.md).
    "ipykernel_ext_10s": (EXT_KERNEL_CLASS, 10_000),
}


def make_kernelspecs(prefix: Path) -> Path:
    """One DistributedProvisioner kernelspec per kernel row, made by the real CLI."""
    for name, (kernel_class, send_timeout) in KERNELS.items():
        spec_file, spec = install_ssh_spec(prefix, f"ssh_{name}", kernel_class=kernel_class)
        spec["argv"][0] = sys.executable  # `python` on a host's PATH; here this environment's
        if send_timeout is not None:
            # As on a cluster host: an IPython profile the launcher's IPKernelApp reads.
            profile = prefix / f"ipython-{name}" / "profile_default"
            profile.mkdir(parents=True)
            (profile / "ipython_kernel_config.py").write_text(
                f"c.ExtKernel.iopub_send_timeout = {send_timeout}\n"
            )
            spec["env"] = {"IPYTHONDIR": str(profile.parent)}
        spec_file.write_text(json.dumps(spec, indent=1))
    return spec_file.parents[1]


def worker(args: argparse.Namespace) -> None:
    """Run the trials of one GP_SOCKET_TIMEOUT setting; print one JSON line per trial."""
    import psutil
    from jupyter_client.kernelspec import KernelSpecManager

    ksm = KernelSpecManager(kernel_dirs=[args.kernels])
    for trial in range(args.trials):
        for name in args.only:
            km = start_kernel(f"ssh_{name}", kernel_spec_manager=ksm)  # CurveZMQ required
            listeners = psutil.Process(km.provisioner.pid).children()
            kc = None
            try:
                kc = new_client(km)
                result = run_grid(kc, args.buttons, args.timeout)
                # Stock ipykernel does not answer iopub_stats_request (unknown to it).
                stats = iopub_stats(kc) if KERNELS[name][0] else {}
            finally:
                if kc is not None:
                    kc.stop_channels()
                km.shutdown_kernel(now=True)
                for proc in listeners:  # left behind by shutdown_kernel(now=True)
                    if proc.is_running():
                        proc.kill()
                Path(km.provisioner.kernel_log).unlink(missing_ok=True)
            print(
                json.dumps(
                    {
                        "setting": args.setting,
                        "kernel": name,
                        "trial": trial,
                        "buttons": args.buttons,
                        **grid_counts(result),
                        "timeouts": stats.get("timeouts"),
                        "socket": stats.get("socket"),
                        "send_timeout_ms": stats.get("send_timeout_ms"),
                    }
                ),
                flush=True,
            )


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["setting"], row["kernel"]), []).append(row)
    fields = ("kernel", "buttons", "comm_open", "display_data", "idle", "seconds_to_idle")
    return [
        {"GP_SOCKET_TIMEOUT": setting, "kernel": kernel}
        | losses([GridTrial(**{f: t[f] for f in fields}) for t in trials])
        | {"stall_timeouts": [t["timeouts"] for t in trials]}
        for (setting, kernel), trials in groups.items()
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--buttons", type=int, default=3000)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per burst")
    parser.add_argument("--settings", nargs="+", default=["default", "0"])
    parser.add_argument("--only", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    # The child process of one setting (see run): python -m benchmarks cluster_burst --worker
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setting", help=argparse.SUPPRESS)
    parser.add_argument("--kernels", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.worker:
        worker(args)
        return None  # the trials went to stdout, for the parent to collect

    prefix = Path(tempfile.mkdtemp(prefix="cluster-burst-"))
    rows: list[dict[str, Any]] = []
    try:
        kernels = make_kernelspecs(prefix)
        for setting in args.settings:
            env = dict(os.environ, GP_UNAUTHORIZED_USERS="ipykernel-ext-bench-nobody")
            env.pop("GP_SOCKET_TIMEOUT", None)
            if setting != "default":
                env["GP_SOCKET_TIMEOUT"] = setting
            child = subprocess.run(
                [
                    *(sys.executable, "-m", "benchmarks", "cluster_burst", "--worker"),
                    f"--setting={setting}",
                    f"--kernels={kernels}",
                    f"--trials={args.trials}",
                    f"--buttons={args.buttons}",
                    f"--timeout={args.timeout}",
                    "--only",
                    *args.only,
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            trial_rows = [json.loads(ln) for ln in child.stdout.splitlines() if ln.startswith("{")]
            if child.returncode != 0:
                print(child.stderr[-3000:], file=sys.stderr)
            rows += trial_rows
    finally:
        shutil.rmtree(prefix, ignore_errors=True)

    summary = summarize(rows)
    print(f"{args.buttons} Buttons, {args.trials} trials per row, CurveZMQ, DistributedProvisioner")
    print_table(
        [
            *("GP_SOCKET_TIMEOUT", "kernel", "trials with loss", "mean comm_open lost"),
            *("display lost", "idle lost", "median s", "stall timeouts"),
        ],
        [
            [
                r["GP_SOCKET_TIMEOUT"],
                r["kernel"],
                f"{r['lossy_trials']}/{r['trials']}",
                f"{r['mean_lost']:.1f}/{r['expected']}",
                r["display_lost"],
                r["idle_lost"],
                fmt(r["median_s"]),
                r["stall_timeouts"],
            ]
            for r in summary
        ],
        align="llrrrrrl",
    )
    return {"trials": rows, "summary": summary}


if __name__ == "__main__":  # python benchmarks/NAME.py: through the runner
    from benchmarks.runner import script

    script(__file__)
