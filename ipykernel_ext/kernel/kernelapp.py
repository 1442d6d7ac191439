"""ExtKernelApp: the launcher of ipykernel_ext. Options, flags and socket creation order.

Wiring only: it starts :class:`ipykernel_ext.kernel.ExtKernel` exactly as ``IPKernelApp``
starts ``IPythonKernel``, with two differences in how sockets are made:

* the IOPub socket is a :class:`ipykernel_ext.kernel.iopub.socket.NoDropXPubSocket`, configured
  (queue size, NODROP, send timeout, CurveZMQ) *before* it is bound, because libzmq copies those
  options into each subscriber's pipe at bind/connect time;
* with ``router_identity = "endpoint"`` the shell and control ROUTER sockets take the
  endpoint they bind as their routing id (:mod:`ipykernel_ext.kernel.router_identity`).

What it prints is stock's: its log lines carry stock's logger name (``[IPKernelApp] WARNING |
...``), as it reads stock's config file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

import ipykernel
import zmq
from ipykernel.kernelapp import IPKernelApp, kernel_aliases, kernel_flags
from jupyter_core.paths import jupyter_config_path
from traitlets import CaselessStrEnum, Dict, Type, Unicode, default
from traitlets.config import Application, Configurable
from traitlets.config.loader import ConfigFileNotFound, KVArgParseConfigLoader

from .. import PROG, __version__
from .busy.main_shell_status import MainShellStatus
from .iopub.settings import IOPubTraits
from .iopub.socket import NoDropXPubSocket
from .iopub.thread import WakeSafeIOPubThread
from .ipkernel import ExtKernel
from .journal.journal import Journal, journal_bytes
from .journal.kernel_part import JournalingKernel
from .orphan import ENV, OrphanWatch, watch_from_environment
from .router_identity import bind_with_endpoint_identity

#: The logger's name, printed at the start of every log line (``[%(name)s]`` in traitlets'
#: ``log_format``). Stock's: tools that run notebooks filter a kernel's stderr for stock's
#: known lines, and ``c.IPKernelApp.logging_config`` names its logger so.
LOG_NAME = "IPKernelApp"

#: Looked up in every directory of ``jupyter --paths`` (config), besides IPython's files.
JUPYTER_CONFIG_FILE = "jupyter_kernel_config.py"

ext_aliases = {
    **kernel_aliases,
    "iopub-sndhwm": "ExtKernelApp.iopub_sndhwm",
    "iopub-send-timeout": "ExtKernelApp.iopub_send_timeout",
    "iopub-backlog-limit": "ExtKernelApp.iopub_backlog_limit",
    "router-identity": "ExtKernelApp.router_identity",
}

ext_flags = {
    **kernel_flags,
    "no-iopub-nodrop": (
        {"ExtKernelApp": {"iopub_nodrop": False}},
        "Let IOPub drop messages for a full subscriber without waiting (stock ipykernel).",
    ),
    # Named for what it turns off (the comm_echo message); it sets ExtKernel.echo_enabled.
    "no-comm-echo": (
        {"ExtKernel": {"echo_enabled": False}},
        "Do not publish comm_echo for the comm messages clients send.",
    ),
    "no-iopub-missed-notice": (
        {"ExtKernel": {"iopub_missed_notice": False}},
        "Do not tell a cell, on its stderr, that a frontend missed some of its IOPub messages.",
    ),
    "comms-on-subshells": (
        {"ExtKernel": {"comms_on_subshells": True}},
        "Run comm messages on the subshell a frontend sends them to, beside a running cell "
        "(stock ipykernel 7), instead of on the main shell.",
    ),
    "no-answer-while-busy": (
        {"ExtKernel": {"answer_while_busy": False}},
        "While a cell runs, leave kernel_info, comm_info and the widget control comm queued "
        "behind it (stock behaviour).",
    ),
}


class ExtKernelApp(IOPubTraits, IPKernelApp):
    """The ipykernel_ext application: ``python -m ipykernel_ext -f {connection_file}``."""

    # The name picks the config file: keep stock's so ipython_kernel_config.py still applies.
    # It is not what users type, so the help and usage texts below name PROG instead.
    name = "ipython-kernel"
    subcommand_description = Unicode(
        f"Subcommands are launched as `{PROG} cmd [args]`. For information on using "
        f"subcommand 'cmd', do: `{PROG} cmd -h`."
    )
    examples = Unicode(
        f"{PROG} -f kernel-1234.json           # what a kernelspec runs\n"
        f"{PROG} install --user --as-default   # the drop-in: the kernelspec python3\n"
        f"{PROG} --help-all                    # every option\n"
    )
    description = "An IPython kernel for Jupyter whose IOPub never loses a message silently."
    # What --version prints: ours and the ipykernel underneath (stock's app prints IPython's).
    version = Unicode(f"{__version__} (ipykernel {ipykernel.__version__})")
    aliases = Dict(ext_aliases)
    flags = Dict(ext_flags)
    classes = [*IPKernelApp.classes, ExtKernel]

    kernel_class = Type(
        "ipykernel_ext.kernel.ExtKernel",
        klass="ipykernel.kernelbase.Kernel",
        help="The Kernel subclass to be used (ExtKernel or a subclass of it).",
    ).tag(config=True)

    subcommands = {
        "install": (
            "ipykernel_ext.install.InstallExtKernelSpecApp",
            "Install the ipykernel_ext kernelspec (python3-ext, or python3 with --as-default)",
        ),
    }

    router_identity = CaselessStrEnum(
        ["off", "endpoint"],
        default_value="off",
        help="""'endpoint': the shell and control ROUTER sockets use the endpoint they bind
        (e.g. b'tcp://127.0.0.1:53017') as their ZMQ routing id, so one client ROUTER can
        address many kernels. Off by default (IPython Parallel expects free identities).""",
    ).tag(config=True)

    # Traitlets names the app's logger after the class, in two places: the logger the app
    # writes to and the one the logging config gives a handler. Both become stock's name.

    @default("log")
    def _stock_log(self) -> logging.Logger:
        """Stock's logger, not propagated (as traitlets makes the app's)."""
        log = logging.getLogger(LOG_NAME)
        log.propagate = False
        return log

    def get_default_logging_config(self) -> dict[str, Any]:
        """Traitlets' config, whose logger (keyed by the class name) is stock's logger."""
        config = super().get_default_logging_config()
        loggers = config.get("loggers", {})  # none under pythonw
        if type(self).__name__ in loggers:
            loggers[LOG_NAME] = loggers.pop(type(self).__name__)
        return config

    def _iopub_option(self, name: str) -> tuple[str, str]:
        """Errors name the flag and the trait, and the kernel's section when the value came
        from there (see :meth:`_take_kernel_iopub_options`)."""
        source = "" if self._given_here(name) else f" (from {self.kernel_class.__name__}.{name})"
        return f"--{name.replace('_', '-')} (ExtKernelApp.{name})", source

    def _given_here(self, name: str) -> bool:
        """Whether option ``name`` is in this app's config (flags, config files)."""
        return any(name in self.config.get(section, {}) for section in self.section_names())

    def _take_kernel_iopub_options(self) -> None:
        """Take the kernel's IOPub options (``c.ExtKernel.iopub_*``) where this app's are not given.

        The kernel class has the same options (IOPubTraits), so that one config works under
        any launcher; under this app the socket is made before the kernel, so the app takes
        the kernel's values wherever its own config does not give one (the most derived class's
        section wins). They are checked as the app's own, the error naming where they came from.
        """
        kernel_class: type[Configurable] = self.kernel_class
        for name in self.traits(setting=lambda field: field is not None):
            sections = [self.config.get(s, {}) for s in kernel_class.section_names()]
            given = [section[name] for section in sections if name in section]
            if given and not self._given_here(name):
                setattr(self, name, given[-1])

    def _create_loader(
        self,
        argv: list[str] | None,
        aliases: Any,
        flags: Any,
        classes: Any,
    ) -> KVArgParseConfigLoader:
        """Traitlets' own loader; only argparse's ``prog`` (otherwise ``__main__.py`` under
        ``python -m``) names the program in usage errors."""
        return KVArgParseConfigLoader(
            argv,
            aliases,
            flags,
            classes=classes,
            log=self.log,
            subcommands=self.subcommands,
            prog=PROG,
        )

    def load_config_file(self, *args: Any, **kwargs: Any) -> None:
        """Load stock's config files, then ``jupyter_kernel_config.py`` from Jupyter's config path.

        Stock ipykernel reads ``ipython_kernel_config.py`` from the IPython profile; that still
        works. The Jupyter config path (``jupyter --paths``) is where a server operator keeps
        Jupyter config, so this kernel's options can live there too. Command-line options win.
        """
        super().load_config_file(*args, **kwargs)
        with contextlib.suppress(ConfigFileNotFound):
            Application.load_config_file(self, JUPYTER_CONFIG_FILE, path=jupyter_config_path())

    def init_iopub(self, context: zmq.Context[Any]) -> None:
        """Create the IOPub socket, configured before bind, and its IOPub thread."""
        self._take_kernel_iopub_options()
        socket = context.socket(zmq.XPUB, socket_class=NoDropXPubSocket)
        socket.linger = 1000
        socket.configure(self.iopub_settings(), log=self.log)
        self._apply_curve_server_options(socket)
        self.iopub_port = self._bind_socket(socket, self.iopub_port)
        self.log.debug("iopub PUB Channel on port: %i", self.iopub_port)  # stock's words
        # Made here, before the IOPub thread uses the socket (zmq_socket_monitor is a call on
        # it); started with the main loop (.orphan: the server's provisioner asked for it).
        self._orphan_monitor = watch_from_environment(socket)
        self.configure_tornado_logger()
        # Stock's thread, except that it never waits on its own wake-up pipe (.iopub.thread).
        self.iopub_thread = WakeSafeIOPubThread(socket, pipe=True, session=self.session)
        # Waits for a full subscriber are spread over the IOPub thread's loop (.iopub.socket).
        socket.attach(self.iopub_thread.io_loop.call_later, self.iopub_thread.thread)
        self.iopub_thread.start()
        # The kernel and the shell send through the thread's queue, as with stock ipykernel.
        self.iopub_socket = self.iopub_thread.background_socket

    def init_poller(self) -> None:
        """Stock's, except for a kernel a server launched to outlive it (:mod:`.orphan`).

        Such a kernel has no parent to poll (jupyter_client's ``independent`` launch sets no
        ``JPY_PARENT_PID``), and stock would then print its console note ("Ctrl-C will not
        work", "--existing ...") into the server's terminal at every kernel start. Its parent
        is recorded as init (pid 1), which ipykernel neither polls (it never goes away) nor
        prints the note for: the server's terminal stays as with a stock launch.
        """
        if os.environ.get(ENV) and not self.parent_handle and sys.platform != "win32":
            self.parent_handle = 1
        super().init_poller()

    def start(self) -> None:
        """Stock's start, with the orphan watch (:mod:`.orphan`) if the launcher asked."""
        monitor = getattr(self, "_orphan_monitor", None)
        if monitor is not None and self.subapp is None:
            if isinstance(getattr(self.kernel, "main_shell_status", None), MainShellStatus):
                socket, timeout = monitor
                OrphanWatch(socket, timeout, self.kernel, self.log).start()
                self._start_journal()
            else:
                # Another kernel class: no way to tell a running cell, so never end it.
                self.log.warning(
                    "%s is set, but %s does not say when a cell runs: the kernel will not "
                    "end itself when left without a server",
                    ENV,
                    type(self.kernel).__name__,
                )
        super().start()

    def _start_journal(self) -> None:
        """Keep the cells for a server that comes back (:mod:`.journal`): a kernel launched
        to outlive its server, whose IOPub thread is ours (it feeds the journal)."""
        max_bytes = journal_bytes(os.environ)
        if (
            max_bytes
            and isinstance(self.kernel, JournalingKernel)
            and isinstance(self.iopub_thread, WakeSafeIOPubThread)
        ):
            journal = Journal(max_bytes)
            self.kernel.journal = journal
            self.iopub_thread.tap = journal

    def _try_bind_socket(self, s: zmq.Socket[Any], port: int) -> int:
        if (
            self.router_identity == "endpoint"
            and s.type == zmq.ROUTER
            and (s is self.shell_socket or s is self.control_socket)
        ):
            return bind_with_endpoint_identity(s, self.transport, self.ip, port)
        return super()._try_bind_socket(s, port)
