"""The kernelspec of ipykernel_ext and the ``python -m ipykernel_ext install`` command.

``pip install ipykernel-ext`` already ships the spec ``python3-ext`` (from ``kernelspecs/``
in the source tree, installed as package data into ``share/jupyter/kernels/``). This command
installs it elsewhere: for one user, into another prefix, under another name or display name,
with extra environment variables, or under the name ``python3`` (``--as-default``) so that
every frontend that starts "Python 3" starts this kernel: the drop-in replacement. It also
sets standalone Voila's connection class in the matching Jupyter config dir's ``voila.json``
(:mod:`.voila_config`; never overwriting, ``--no-voila`` skips it).

The spec is ipykernel's own (same logos, ``"debugger": true``,
``"supported_encryption": ["curve"]``) with the launcher swapped for ``-m ipykernel_ext``, and
``"ends_when_orphaned": true`` in its metadata: the kernel ends itself once left without a
server, so the server extension launches it to outlive a server that dies
(:mod:`ipykernel_ext.server.lasting`).
"""

from __future__ import annotations

import argparse
import errno
import os
import platform
import shutil
import sys
from typing import Any

from ipykernel.kernelspec import KERNEL_NAME as STOCK_KERNEL_NAME
from ipykernel.kernelspec import get_kernel_dict, make_ipkernel_cmd, write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_core.paths import SYSTEM_CONFIG_PATH, jupyter_config_dir
from traitlets import Unicode
from traitlets.config import Application

from . import KERNEL_NAME
from .protocol import ENDS_WHEN_ORPHANED
from .voila_config import configure_voila

DISPLAY_NAME = "Python 3 (ipykernel_ext)"
LAUNCHER_MODULE = "ipykernel_ext"


def kernel_argv(executable: str | None = None, frozen_modules: bool = False) -> list[str]:
    """The kernelspec ``argv`` that starts ipykernel_ext with ``executable``."""
    python_arguments = []
    # Like ipykernel's own install: frozen modules hide stdlib sources from the debugger.
    if platform.python_implementation() == "CPython" and not frozen_modules:
        python_arguments.append("-Xfrozen_modules=off")
    return make_ipkernel_cmd(
        mod=LAUNCHER_MODULE, executable=executable, python_arguments=python_arguments
    )


def kernel_metadata() -> dict[str, Any]:
    """Stock's kernelspec metadata, and that this kernel ends itself once orphaned."""
    return {**get_kernel_dict()["metadata"], ENDS_WHEN_ORPHANED: True}


def install(
    *,
    kernel_name: str = KERNEL_NAME,
    display_name: str | None = None,
    user: bool = False,
    prefix: str | None = None,
    env: dict[str, str] | None = None,
    frozen_modules: bool = False,
    kernel_spec_manager: KernelSpecManager | None = None,
) -> str:
    """Install the ipykernel_ext kernelspec; return the directory it was installed in."""
    overrides: dict[str, Any] = {
        "argv": kernel_argv(frozen_modules=frozen_modules),
        "display_name": display_name or DISPLAY_NAME,
        "metadata": kernel_metadata(),
    }
    if env:
        overrides["env"] = dict(env)
    staged = write_kernel_spec(overrides=overrides)
    try:
        manager = kernel_spec_manager or KernelSpecManager()
        return manager.install_kernel_spec(
            staged, kernel_name=kernel_name, user=user, prefix=prefix
        )
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def voila_config_dir(*, user: bool = False, prefix: str | None = None) -> str:
    """The Jupyter config dir matching the kernelspec's destination: the user's
    (``--user``), ``PREFIX/etc/jupyter`` (``--prefix``, ``--sys-prefix``), else the first
    system config dir (as the kernelspec goes to the first system data dir)."""
    if user:
        return jupyter_config_dir()
    if prefix:
        return os.path.join(prefix, "etc", "jupyter")
    return SYSTEM_CONFIG_PATH[0]


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Install the ipykernel_ext kernelspec for Jupyter."
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="Install for the current user.")
    where.add_argument(
        "--sys-prefix",
        action="store_const",
        const=sys.prefix,
        dest="prefix",
        help=f"Install into Python's sys.prefix ({sys.prefix}): for a virtual env or conda env.",
    )
    where.add_argument("--prefix", help="Install into this prefix (PREFIX/share/jupyter/kernels).")
    parser.add_argument(
        "--name",
        help=f"Kernelspec name (default {KERNEL_NAME!r}, or {STOCK_KERNEL_NAME!r} with "
        "--as-default).",
    )
    parser.add_argument(
        "--display-name", help=f"Name shown in frontends (default {DISPLAY_NAME!r})."
    )
    parser.add_argument(
        "--as-default",
        action="store_true",
        help=f"Install under the name {STOCK_KERNEL_NAME!r}, replacing stock ipykernel's spec "
        "there, so every frontend that starts 'Python 3' starts ipykernel_ext.",
    )
    parser.add_argument(
        "--env",
        action="append",
        nargs=2,
        default=[],
        metavar=("NAME", "VALUE"),
        help="Set an environment variable for the kernel (repeatable).",
    )
    parser.add_argument(
        "--frozen-modules",
        action="store_true",
        help="Let Python use frozen stdlib modules (faster start, weaker debugging).",
    )
    parser.add_argument(
        "--no-voila",
        action="store_true",
        help="Do not set standalone Voila's kernel_websocket_connection_class in the "
        "config dir's voila.json (by default it is set there unless something is set "
        "already).",
    )
    return parser


class InstallExtKernelSpecApp(Application):
    """``python -m ipykernel_ext install``: argparse behind a traitlets subcommand."""

    name = Unicode("ipykernel-ext-install")
    description = "Install the ipykernel_ext kernelspec."

    def initialize(self, argv: list[str] | None = None) -> None:
        self.argv = sys.argv[1:] if argv is None else argv

    def start(self) -> None:
        opts = _parser("python -m ipykernel_ext install").parse_args(self.argv)
        if opts.as_default and opts.name not in (None, STOCK_KERNEL_NAME):
            self.log.error("--as-default installs as %r; drop --name", STOCK_KERNEL_NAME)
            self.exit(2)
        name = STOCK_KERNEL_NAME if opts.as_default else (opts.name or KERNEL_NAME)
        try:
            dest = install(
                kernel_name=name,
                display_name=opts.display_name,
                user=opts.user,
                prefix=opts.prefix,
                env=dict(opts.env),
                frozen_modules=opts.frozen_modules,
            )
        except OSError as e:
            if e.errno != errno.EACCES:
                raise
            print(f"{e}\nPerhaps you want --user or --sys-prefix?", file=sys.stderr)
            self.exit(1)
        print(f"Installed kernelspec {name} in {dest}")
        if not opts.no_voila:
            where = voila_config_dir(user=opts.user, prefix=opts.prefix)
            try:
                print(configure_voila(where).message)
            except OSError as e:
                print(f"Voila not configured: {e}", file=sys.stderr)
