"""The contract with other packages' internals: every private name we rely on, and its shape.

ipykernel_ext relies on names of ipykernel, ipywidgets, traitlets, jupyter_server,
jupyter_client, comm and pyzmq that those packages do not promise to keep (underscore names,
attributes set in ``__init__``, the layout of a dict, a behaviour only their code shows). An
upgrade that renames or reshapes one must fail here, naming it and the file of ours that uses
it, instead of failing in a user's kernel.

:data:`CONTRACT` is the table, one :class:`Row` per upstream name: its ``"module:Qualified.name"``
path, the shapes we rely on (:class:`Function`, :class:`Accepts`, :class:`Value`,
:class:`IsProperty`, :class:`Trait`, :class:`Attribute` on a small new instance, :class:`Source`
patterns, a :class:`Probe` that calls it), our files that use it, and why. To add a name, add a
row (or a shape to its row); ``test_users_mention_the_name`` keeps the users in step with the code.
No kernel process: imports, ``inspect`` and small in-process objects. The versions this table
was checked against are in README ("Tested with").
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import re
import types
from collections.abc import Callable, MutableSet, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

ImportModule = Callable[[str], types.ModuleType]

_MISSING = object()


# --- shapes ---------------------------------------------------------------------------------


class Shape:
    """What we rely on about one upstream name. ``problems`` returns what does not hold."""

    def describe(self) -> str:
        raise NotImplementedError

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        raise NotImplementedError


def _kind(owner: Any, name: str, value: Any) -> str:
    """How ``name`` is defined on ``owner``: staticmethod, classmethod, property, ..."""
    raw = inspect.getattr_static(owner, name, None) if isinstance(owner, type) else None
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, property):
        return "property"
    if inspect.iscoroutinefunction(value):
        return "async function"
    if callable(value):
        return "function"
    return type(value).__name__


class Function(Shape):
    """A callable taking ``params`` first, in this order; any further ones have defaults."""

    def __init__(self, *params: str, kind: str = "function") -> None:
        self.params = params
        self.kind = kind  # or "async function", "staticmethod", "classmethod"

    def describe(self) -> str:
        return f"{self.kind} ({', '.join(self.params)})"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        found = _kind(owner, name, value)
        if found != self.kind:
            return [f"is a {found}, not a {self.kind}"]
        try:
            signature = inspect.signature(value)
        except (TypeError, ValueError) as exc:
            return [f"has no readable signature ({exc})"]
        params = list(signature.parameters.values())
        names = tuple(p.name for p in params[: len(self.params)])
        out = []
        if names != self.params:
            out.append(f"takes {signature}, expected ({', '.join(self.params)}, ...)")
        for extra in params[len(self.params) :]:
            if extra.default is inspect.Parameter.empty and extra.kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                out.append(f"has a new required parameter {extra.name!r}: {signature}")
        return out


class Accepts(Shape):
    """A callable that accepts these keyword arguments (in any position)."""

    def __init__(self, *keywords: str) -> None:
        self.keywords = keywords

    def describe(self) -> str:
        return f"accepts {', '.join(self.keywords)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        parameters = inspect.signature(value).parameters
        return [f"no longer accepts {k!r}" for k in self.keywords if k not in parameters]


@dataclass(frozen=True)
class Value(Shape):
    """A module or class attribute that is an instance of ``type_``."""

    type_: type | tuple[type, ...]

    def describe(self) -> str:
        return f"a {_type_names(self.type_)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        if isinstance(value, self.type_):
            return []
        return [f"is a {type(value).__name__}, not a {_type_names(self.type_)}"]


@dataclass(frozen=True)
class IsProperty(Shape):
    def describe(self) -> str:
        return "a property"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        found = _kind(owner, name, value)
        return [] if found == "property" else [f"is a {found}, not a property"]


@dataclass(frozen=True)
class Trait(Shape):
    """A traitlets trait of the class, of this trait type (``traitlets.Any`` etc.)."""

    trait_type: str

    def describe(self) -> str:
        return f"a traitlets {self.trait_type} trait"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        import traitlets

        traits = owner.class_traits() if hasattr(owner, "class_traits") else {}
        if name not in traits:
            return ["is no longer a trait"]
        expected = getattr(traitlets, self.trait_type)
        if not isinstance(traits[name], expected):
            return [f"is a {type(traits[name]).__name__} trait, not a {self.trait_type}"]
        return []


@dataclass(frozen=True)
class Attribute(Shape):
    """An instance attribute (set in ``__init__``): checked on ``make()``'s instance."""

    type_: type | tuple[type, ...]
    make: Callable[[], Any]

    def describe(self) -> str:
        return f"an instance attribute holding a {_type_names(self.type_)}"

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        instance = self.make()
        found = getattr(instance, name, _MISSING)
        if found is _MISSING:
            return [f"is not set on a new {type(instance).__name__} instance"]
        if not isinstance(found, self.type_):
            return [f"holds a {type(found).__name__}, not a {_type_names(self.type_)}"]
        return []


class Source(Shape):
    """A behaviour only the code shows: its source contains each regular expression."""

    def __init__(self, *patterns: str) -> None:
        self.patterns = patterns

    def describe(self) -> str:
        return "code matching " + ", ".join(repr(p) for p in self.patterns)

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        target: Any = value.fget if isinstance(value, property) else value
        try:
            text = inspect.getsource(target)
        except (OSError, TypeError) as exc:
            return [f"has no readable source ({exc})"]
        missing = [p for p in self.patterns if not re.search(p, text)]
        return [f"no longer has code matching {p!r}" for p in missing]


@dataclass(frozen=True)
class Probe(Shape):
    """A behaviour checked by calling it: ``check(value)`` returns what is wrong, or None."""

    description: str
    check: Callable[[Any], str | None]

    def describe(self) -> str:
        return self.description

    def problems(self, owner: Any, name: str, value: Any) -> list[str]:
        try:
            problem = self.check(value)
        except Exception as exc:
            problem = f"raised {type(exc).__name__}: {exc}"
        return [] if problem is None else [problem]


def _type_names(type_: type | tuple[type, ...]) -> str:
    types_ = type_ if isinstance(type_, tuple) else (type_,)
    return " or ".join(t.__name__ for t in types_)


# --- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    path: str  # "module:Qualified.name"
    shapes: Sequence[Shape]
    users: tuple[str, ...]
    why: str = ""

    def because(self, why: str) -> Row:
        return dataclasses.replace(self, why=why)

    @property
    def module(self) -> str:
        return self.path.split(":")[0]

    @property
    def qualname(self) -> str:
        return self.path.split(":")[1]

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


def _new_kernel() -> Any:
    from ipykernel.kernelbase import Kernel

    return Kernel()


def _new_has_traits() -> Any:
    from traitlets import HasTraits, Int

    class Probe(HasTraits):
        value = Int(0)

    instance = Probe()
    instance.value = 7
    return instance


def _new_kernel_client() -> Any:
    from jupyter_client import BlockingKernelClient

    return BlockingKernelClient()


def _new_zmq_context() -> Any:
    import zmq

    return zmq.Context()


def _trait_values_hold_set_values(has_traits_type: Any) -> str | None:
    instance = _new_has_traits()
    values = instance._trait_values
    if not isinstance(values, dict) or values.get("value") != 7:
        return f"_trait_values is {values!r}: it no longer maps a trait name to its set value"
    return None


def _remove_buffers_splits_as_we_do(remove_buffers: Any) -> str | None:
    data = b"\x00\x01"
    state = {"plain": 1, "b": data, "nested": {"x": data}, "items": [1, data]}
    result = remove_buffers(state)
    expected = (
        {"plain": 1, "nested": {}, "items": [1, None]},
        [["b"], ["nested", "x"], ["items", 1]],
        [data, data, data],
    )
    if result != expected:
        return f"splits {state!r} into {result!r}, expected {expected!r}"
    return None


def _buffer_layout(get_buffer: Any) -> str | None:
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    manager = MappingKernelManager()
    manager._kernel_buffers["k"]  # a new (empty) offline buffer, as start_buffering makes
    entry = get_buffer(manager, "k", "")
    if not isinstance(entry, dict) or set(entry) != {"buffer", "session_key", "channels"}:
        return f"returns {entry!r}, not a dict of buffer, session_key and channels"
    return None


def _untracked_as_ours(trait: Any) -> str | None:
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    from ipykernel_ext.protocol import UNTRACKED_MESSAGE_TYPES

    default = MappingKernelManager().untracked_message_types
    if frozenset(default) != UNTRACKED_MESSAGE_TYPES:
        return (
            f"defaults to {sorted(default)!r}; protocol.UNTRACKED_MESSAGE_TYPES is "
            f"{sorted(UNTRACKED_MESSAGE_TYPES)!r}"
        )
    return None


def _loader_passes_prog(loader_class: Any) -> str | None:
    loader = loader_class([], {}, {}, prog="python -m ipykernel_ext")
    loader.load_config()
    if loader.parser.prog != "python -m ipykernel_ext":
        return f"parser.prog is {loader.parser.prog!r}: extra keywords no longer reach argparse"
    return None


def _logger_named_after_the_class(get_default_logging_config: Any) -> str | None:
    from traitlets.config import Application

    class NamedApp(Application):
        pass

    app = NamedApp()
    config = get_default_logging_config(app)
    if list(config.get("loggers", {})) != ["NamedApp"]:
        return f"its loggers are {list(config.get('loggers', {}))}, not the class name's"
    if "%(name)s" not in config["formatters"]["console"]["format"]:
        return "the console format no longer prints the logger's name"
    if app.log.name != "NamedApp":
        return f"the default log is {app.log.name!r}, not the class name"
    return None


def _version_major_1(version: Any) -> str | None:
    return None if str(version).split(".")[0] == "1" else f"is {version!r}, not 1.x"


KERNEL = "ipykernel.kernelbase:Kernel"
APP = "ipykernel.kernelapp:IPKernelApp"
WIDGET = "ipywidgets.widgets.widget"
WS = "jupyter_server.services.kernels.connection.channels:ZMQChannelsWebsocketConnection"
MKM = "jupyter_server.services.kernels.kernelmanager:MappingKernelManager"
GWS = "jupyter_server.gateway.connections:GatewayWebSocketConnection"
GATEWAY_PY = "ipykernel_ext/server/gateway/gateway_connection.py"
GATEWAY_LINK_PY = "ipykernel_ext/server/gateway/gateway_link.py"
SESSION_RETURN_PY = "ipykernel_ext/server/gateway/session_return.py"

KERNEL_PY = "ipykernel_ext/kernel/ipkernel.py"
APP_PY = "ipykernel_ext/kernel/kernelapp.py"
ECHO_PY = "ipykernel_ext/kernel/comms/echo.py"
WIDGET_STATE_PY = "ipykernel_ext/kernel/widgets/snapshot.py"
WIDGET_READER_PY = "ipykernel_ext/kernel/widgets/reader.py"
SERVER_PY = "ipykernel_ext/server/websocket/connection.py"
WIRE_PY = "ipykernel_ext/server/websocket/wire.py"
PACED_PY = "ipykernel_ext/server/websocket/paced_iopub.py"
SERVER_KERNELS_PY = "ipykernel_ext/server/kernels.py"
EXTENSION_PY = "ipykernel_ext/server/extension.py"
STREAMS_PY = "ipykernel_ext/shared_channels/clients.py"
IOPUB_ADOPT_PY = "ipykernel_ext/kernel/iopub/adoption.py"
IOPUB_KERNEL_OPTIONS_PY = "ipykernel_ext/kernel/iopub/kernel_options.py"
IOPUB_THREAD_PY = "ipykernel_ext/kernel/iopub/thread.py"
BUSY_ANSWERS_PY = "ipykernel_ext/kernel/busy/answers.py"
BUSY_ROUTING_PY = "ipykernel_ext/kernel/busy/busy_routing.py"
CONTROL_COMM_PY = "ipykernel_ext/kernel/widgets/control_comm.py"
RECONCILE_PY = "ipykernel_ext/kernel/widgets/reconcile.py"
CELL_EVENTS_PY = "ipykernel_ext/kernel/comms/cell_events.py"
ZMQSHELL_PY = "ipykernel_ext/kernel/zmqshell.py"
MAIN_SHELL_PY = "ipykernel_ext/kernel/comms/main_shell.py"
COMM_ROUTING_PY = "ipykernel_ext/kernel/comms/comm_routing.py"
COMM_OWNERS_PY = "ipykernel_ext/kernel/comms/owners.py"
SHELL_HANDLERS_PY = "ipykernel_ext/kernel/shell_handlers.py"
LASTING_PROVISIONER_PY = "ipykernel_ext/server/lasting/provisioner.py"
LASTING_ADOPTION_PY = "ipykernel_ext/server/lasting/taking_back.py"
LASTING_STOPPING_PY = "ipykernel_ext/server/lasting/stopping.py"
LOCAL_PROVISIONER = "jupyter_client.provisioning.local_provisioner:LocalProvisioner"
ONE_CALLBACK_PY = "ipykernel_ext/kernel/comms/one_callback.py"
JOURNAL_KERNEL_PY = "ipykernel_ext/kernel/journal/kernel_part.py"
BUSY_INPROC = "tests/unit/test_busy_answers_inprocess.py"
QUERIES_INPROC = "tests/unit/test_control_queries_inprocess.py"

CONTRACT: list[Row] = [
    # ipykernel: the kernel ---------------------------------------------------------------
    Row(f"{KERNEL}.control_msg_types", [Value(list)], (KERNEL_PY,)).because(
        "extended with the control-channel queries"
    ),
    Row(f"{KERNEL}.shell_handlers", [Attribute(dict, _new_kernel)], (KERNEL_PY,)).because(
        "the comm handlers are wrapped there to publish comm_echo"
    ),
    Row(
        f"{KERNEL}.process_control",
        [Function("self", "msg", kind="async function")],
        (KERNEL_PY, QUERIES_INPROC),
    ).because("overridden to answer the queries without busy/idle (the in-process tests call it)"),
    Row(f"{KERNEL}.control_stream", [Trait("Instance")], (KERNEL_PY, QUERIES_INPROC)).because(
        "the stream query replies are sent on"
    ),
    Row(
        f"{KERNEL}.iopub_thread",
        [Trait("Any")],
        (KERNEL_PY, IOPUB_ADOPT_PY, IOPUB_KERNEL_OPTIONS_PY, QUERIES_INPROC, JOURNAL_KERNEL_PY),
    ).because(
        "its socket's counters answer iopub_stats_request; a journaled cell is sent again on it"
    ),
    Row(
        f"{KERNEL}._topic", [Function("self", "topic")], (KERNEL_PY, ECHO_PY, JOURNAL_KERNEL_PY)
    ).because("the ZMQ topic of comm_echo and of a journaled cell sent again, as stock builds it"),
    Row(
        f"{KERNEL}._publish_execute_input",
        [
            Function("self", "code", "parent", "execution_count"),
            Source(r'"execute_input"'),
        ],
        (JOURNAL_KERNEL_PY,),
    ).because("overridden: a cell starts (the whole request, its metadata) as its input goes out"),
    Row(
        f"{KERNEL}.finish_metadata",
        [Function("self", "parent", "metadata", "reply_content")],
        (JOURNAL_KERNEL_PY,),
    ).because("overridden: the cell's reply content and metadata, kept for a returning server"),
    Row(
        f"{KERNEL}.execute_request",
        [
            Function("self", "stream", "ident", "parent", kind="async function"),
            Source(
                r"metadata = self\.finish_metadata\(parent, metadata, reply_content\)",
                r'"execute_reply",',
            ),
        ],
        (JOURNAL_KERNEL_PY,),
    ).because(
        "overridden: after stock's reply (built from finish_metadata's metadata) the same reply "
        "goes to each server that asked for the cell again, on the cell's stream"
    ),
    Row(
        f"{KERNEL}.kernel_info", [IsProperty(), Source(r"supported_features")], (KERNEL_PY,)
    ).because("a property whose dict carries the supported_features we extend"),
    Row(
        f"{KERNEL}.shell_channel_thread_main",
        [Function("self", "msg", kind="async function")],
        (KERNEL_PY,),
    ).because("overridden: sees every shell message before the main thread does"),
    Row(
        f"{KERNEL}.shell_main",
        [
            Function("self", "subshell_id", "msg", kind="async function"),
            Source(r"asyncio_lock = self\._main_asyncio_lock"),
        ],
        (MAIN_SHELL_PY,),
    ).because(
        "overridden: the main shell meets a comm marker here and handles the comm messages of "
        "its run under _main_asyncio_lock, which is held while the main shell runs a request: "
        "locked while this task runs means its holder (an async cell) awaits"
    ),
    Row(
        f"{KERNEL}.start",
        [
            Function("self"),
            Source(
                r"set_on_recv_callback\(self\.shell_main\)",
                r"self\.io_loop\s*=",
                r"on_recv\(self\.shell_channel_thread_main",
            ),
        ],
        (KERNEL_PY, BUSY_ANSWERS_PY),
    ).because(
        "every message of the main shell's queue reaches shell_main; overridden to note the "
        "main shell's thread; io_loop runs the after-cell check; it hands every shell message "
        "to shell_channel_thread_main (else our override never runs)"
    ),
    Row(
        f"{KERNEL}.dispatch_shell",
        [
            Function("self", "msg", "subshell_id", "concurrent", kind="async function"),
            Source(
                r'msg_type not in \{"comm_msg", "comm_close"\}',
                r"if not concurrent:\s*self\._publish_status\(\"busy\"",
                r"self\.should_handle\(stream, msg, idents\)",
                r"except KeyboardInterrupt:",
                r'_publish_status\("busy", "shell"\)',
                r'_publish_status_and_flush\(\s*"idle"',
                r"self\.shell_handlers\.get\(msg_type",
            ),
        ],
        (MAIN_SHELL_PY, KERNEL_PY, SHELL_HANDLERS_PY),
    ).because(
        "comm messages dispatched on the main shell; a comm_open must be given its subshell id;"
        " concurrent=True publishes no status (ours publishes the mid-cell comm's own); "
        "should_handle runs verified, before the handler; a handler's KeyboardInterrupt is "
        "swallowed (the comm handlers note it mid-cell, comms/mid_cell.py); the main shell "
        "publishes its busy/idle through _publish_status: how the kernel knows which request "
        "the main shell is running; overridden: the frames it is given are what comm_echo "
        "re-sends; it looks the handler up with shell_handlers.get (a subshell reads the "
        "kernel's own execute_request there, shell_handlers.py)"
    ),
    Row(
        f"{KERNEL}._main_asyncio_lock", [Attribute(asyncio.Lock, _new_kernel)], (SHELL_HANDLERS_PY,)
    ).because(
        "the main shell's lock, assigned in __init__ and read by shell_main: the kernel keeps "
        "it whatever a UI loop assigns (KeptMainLock, a property of ours)"
    ),
    Row(
        f"{KERNEL}._input_request",
        [
            Function("self", "prompt", "ident", "parent", "password"),
            Source(r"zmq\.select\(\[self\.stdin_socket\], \[\], \[self\.stdin_socket\], 0\.01\)"),
        ],
        (ONE_CALLBACK_PY, JOURNAL_KERNEL_PY),
    ).because(
        "overridden: a callback's input() off the main thread ends with an interrupt, raised "
        "in its thread, which the wait's 10 ms poll (Python code) lets in; the journal keeps "
        "the question while it waits"
    ),
    Row(
        f"{KERNEL}.pre_handler_hook",
        [Function("self"), Source(r"signal\(SIGINT, default_int_handler\)")],
        (KERNEL_PY,),
    ).because(
        "overridden: SIGINT raises KeyboardInterrupt while a request is handled; ours counts "
        "the interrupts too (a UI loop's thread stops taking comm messages at one)"
    ),
    # jupyter-ui-poll (the test extra; what its ui_events() swaps in the kernel) -------------
    Row(
        "jupyter_ui_poll._poll:KernelWrapper.__init__",
        [
            Source(
                r"kernel\._main_asyncio_lock = contextlib\.nullcontext\(\)",
                r'kernel\.shell_handlers\["execute_request"\] = self\._execute_request_async',
                r'shell\.events\.register\("post_run_cell"',
            )
        ],
        (SHELL_HANDLERS_PY,),
    ).because(
        "ui_events() swaps the main shell's lock for nullcontext() (stock's shell_main then "
        "drops the request) and the execute_request handler for one that defers the request, "
        "until the next cell's post_run_cell: the kernel keeps its lock and, while the swap "
        "is in force, its own execute_request handler"
    ),
    Row(
        "jupyter_ui_poll._poll:KernelWrapper.restore",
        [Source(r"_kernel\._main_asyncio_lock = self\._backup_main_asyncio_lock")],
        (SHELL_HANDLERS_PY,),
    ).because("the swap ends by assigning the kernel's own lock back: KeptMainLock's signal"),
    Row(
        f"{KERNEL}.should_handle", [Function("self", "stream", "msg", "idents")], (MAIN_SHELL_PY,)
    ).because(
        "overridden: a comm message handled mid-cell publishes its busy there, once verified, "
        "and a reply to a comm request consumes ipykernel's note of it there"
    ),
    Row(
        "ipykernel.comm.comm:BaseComm._reply_subshell_for",
        [
            Function("self", "data", "default"),
            Source(r"self\._reply_subshell_ids\.pop\(request_id\)"),
        ],
        (COMM_ROUTING_PY,),
    ).because(
        "consumes the note of a comm request's subshell when its reply is dispatched, verified"
    ),
    Row(
        "ipykernel.comm.comm:BaseComm.__init__",
        [Source(r"self\._reply_subshell_ids = \{\}")],
        (COMM_ROUTING_PY,),
    ).because("a comm's notes of its requests' subshells: a dict, read before consuming one"),
    Row(
        "ipykernel.ipkernel:_create_comm",
        [Function(), Source(r"return BaseComm\(")],
        (COMM_OWNERS_PY,),
    ).because(
        "ipykernel's comm.create_comm makes its BaseComm: ours makes a subclass of it that "
        "notes the subshell console whose cell made it"
    ),
    Row(
        "ipykernel.comm.comm:BaseComm.publish_msg",
        [Source(r"self\.kernel\.get_parent\(\)")],
        (COMM_OWNERS_PY,),
    ).because(
        "a comm publishes under the parent of the context it runs in: the owner is read the "
        "same way"
    ),
    Row("ipykernel.subshell:SubshellThread", [Value(type)], (MAIN_SHELL_PY,)).because(
        "a subshell's thread: handle_waiting_comms there runs nothing of the main shell's"
    ),
    Row(f"{KERNEL}._get_shell_context_var", [Function("self", "var")], (MAIN_SHELL_PY,)).because(
        "the cell's parent ident, given back after a comm message handled mid-cell"
    ),
    Row(
        "ipykernel.subshell_manager:SubshellManager.get_shell_channel_to_subshell_socket",
        [Function("self", "subshell_id")],
        (MAIN_SHELL_PY,),
    ).because("None: the main shell's queue, where a comm marker is sent"),
    Row(
        "ipykernel.subshell_manager:SubshellManager.list_subshell",
        [Function("self")],
        (MAIN_SHELL_PY,),
    ).because("whether a comm_open's subshell still exists"),
    Row(
        "IPython.core.interactiveshell:InteractiveShell.init_events",
        [Function("self"), Source(r"self\.events\s*=\s*EventManager")],
        (ZMQSHELL_PY,),
    ).because("overridden to give the shell CellEvents with the same callbacks"),
    Row(
        "IPython.core.events:EventManager.__init__", [Source(r"self\.callbacks\b")], (ZMQSHELL_PY,)
    ).because("the registered callbacks, carried over to CellEvents"),
    Row(
        "comm.base_comm:BaseComm.handle_msg",
        [
            Source(
                r'trigger\("pre_execute"\)',
                r'trigger\("post_execute"\)',
                r"self\._msg_callback\(msg\)",
            )
        ],
        (CELL_EVENTS_PY, CONTROL_COMM_PY),
    ).because(
        "what CellEvents holds back mid-cell; a comm_msg reaches the swapped handler with "
        "stock's pre/post_execute around it"
    ),
    Row(
        f"{KERNEL}._publish_status", [Function("self", "status", "channel", "parent")], (KERNEL_PY,)
    ).because(
        "overridden, and given to the busy answers: busy/idle exactly as stock publishes them"
    ),
    Row(f"{KERNEL}.get_parent", [Function("self", "channel")], (KERNEL_PY,)).because(
        "the running request, the parent of a re-announced status"
    ),
    Row(f"{KERNEL}.shell_stream", [Trait("Instance")], (BUSY_ANSWERS_PY,)).because(
        "replies sent from the shell-channel thread"
    ),
    Row(
        f"{KERNEL}.kernel_info_request",
        [Function("self", "stream", "ident", "parent", kind="async function")],
        (BUSY_ANSWERS_PY,),
    ).because("stock's kernel_info handler, called from the shell-channel thread"),
    Row(
        f"{KERNEL}._publish_status_and_flush", [Source(r"self\._publish_status\(")], (KERNEL_PY,)
    ).because("its idle goes through _publish_status, which the kernel overrides"),
    Row(
        "ipykernel.ipkernel:IPythonKernel.__init__",
        [
            Source(
                r"comm_manager\s*=\s*comm\.get_comm_manager\(\)",
                r"shell_handlers\[msg_type\]\s*=\s*getattr\(self\.comm_manager",
            )
        ],
        (KERNEL_PY,),
    ).because("comm_open/msg/close are the comm manager's, put in shell_handlers"),
    Row(
        "ipykernel.comm.manager:CommManager.comms",
        [Trait("Dict")],
        (ECHO_PY, BUSY_ROUTING_PY, BUSY_ANSWERS_PY, CONTROL_COMM_PY),
    ).because(
        "the known comms by id: whether, and under which target, a comm_msg is echoed; which "
        "comms comm_info lists mid-cell, and which control comm is routed or answered"
    ),
    Row("ipykernel.comm.manager:CommManager.targets", [Trait("Dict")], (BUSY_ROUTING_PY,)).because(
        "whether ipywidgets registered its control comm target"
    ),
    Row(
        "comm.base_comm:BaseComm.on_msg",
        [Function("self", "callback"), Source(r"self\._msg_callback\s*=\s*callback")],
        (CONTROL_COMM_PY, BUSY_INPROC),
    ).because("a control comm's handler is read from _msg_callback and swapped through on_msg"),
    Row(
        "comm.base_comm:BaseComm.__init__",
        [Accepts("target_name"), Source(r"self\.target_name\s*=", r'f"comm-\{self\.comm_id\}"')],
        (ECHO_PY, "ipykernel_ext/protocol.py"),
    ).because(
        "a comm keeps its target_name, which the echo exclusions match; a comm's IOPub topic, "
        "which protocol.comm_topic builds for what we send on a comm"
    ),
    # ipykernel: the app and the IOPub thread ---------------------------------------------
    Row(f"{APP}.init_iopub", [Function("self", "context")], (APP_PY,)).because(
        "overridden: the IOPub socket is configured before bind"
    ),
    Row(f"{APP}._apply_curve_server_options", [Function("self", "socket")], (APP_PY,)).because(
        "CurveZMQ on our IOPub socket, as on stock's"
    ),
    Row(f"{APP}._bind_socket", [Function("self", "s", "port")], (APP_PY,)).because(
        "binds with stock's port retries"
    ),
    Row(
        f"{APP}._try_bind_socket",
        [Function("self", "s", "port")],
        (APP_PY, "ipykernel_ext/kernel/router_identity.py"),
    ).because("overridden to bind shell/control with their endpoint as routing id"),
    Row(f"{APP}.configure_tornado_logger", [Function("self")], (APP_PY,)).because(
        "called where stock's init_iopub calls it"
    ),
    Row(f"{APP}.iopub_port", [Trait("Int")], (APP_PY,)).because("set after our bind"),
    Row(f"{APP}.shell_socket", [Trait("Any")], (APP_PY,)).because("which socket is being bound"),
    Row(f"{APP}.control_socket", [Trait("Any")], (APP_PY,)).because("which socket is being bound"),
    Row(f"{APP}.kernel_class", [Trait("Type")], (APP_PY,)).because("set to ExtKernel"),
    Row("ipykernel.kernelapp:kernel_aliases", [Value(dict)], (APP_PY,)).because(
        "stock's aliases, extended"
    ),
    Row("ipykernel.kernelapp:kernel_flags", [Value(dict)], (APP_PY,)).because(
        "stock's flags, extended"
    ),
    Row(
        "ipykernel.iostream:IOPubThread.__init__",
        [
            Function("self", "socket", "pipe", "session"),
            Source(
                r"self\.socket\s*=\s*socket",
                r"self\.background_socket\s*=",
                r"self\.io_loop\s*=",
                r"self\.thread\s*=\s*threading\.Thread\(",
            ),
        ],
        (
            APP_PY,
            KERNEL_PY,
            IOPUB_ADOPT_PY,
            IOPUB_KERNEL_OPTIONS_PY,
            "tests/kernel/test_launchers.py",
        ),
    ).because(
        "made as stock makes it, around our socket; IOPubThread.socket is our XPUB socket; "
        "background_socket is what the kernel sends on; the tests stop the thread's loop, then "
        "join the thread"
    ),
    Row(
        "ipykernel.iostream:IOPubThread._really_send",
        [Source(r"self\.socket\.send_multipart\(", r"zmq\.ENOTSOCK")],
        (IOPUB_ADOPT_PY, IOPUB_THREAD_PY),
    ).because(
        "every send goes through IOPubThread.socket, so replacing it adopts the socket; a send "
        "on a closed socket raises ENOTSOCK, which ipykernel swallows; the adopted socket "
        "raises the same once its owner is closed; overridden to show each message sent, in "
        "wire order, to the cell journal"
    ),
    Row(
        "ipykernel.iostream:IOPubThread.close",
        [Function("self"), Source(r"self\.socket\.close\(")],
        (IOPUB_ADOPT_PY,),
    ).because(
        "closing the IOPub thread closes IOPubThread.socket: the adopted one closes its owner"
    ),
    Row(
        "ipykernel.iostream:IOPubThread.schedule",
        [
            Function("self", "f"),
            Source(r"self\._events\.append\(f\)", r"self\._event_pipe\.send\(b\"\"\)"),
        ],
        (IOPUB_ADOPT_PY, IOPUB_KERNEL_OPTIONS_PY, IOPUB_THREAD_PY),
    ).because(
        "runs the adoption, and a run-time change of the options, on the IOPub thread; "
        "WakeSafeIOPubThread overrides it: queue the event, then wake the thread with a "
        "blocking send on the caller's own pipe (the send it makes non-blocking on that thread)"
    ),
    Row(
        "ipykernel.iostream:IOPubThread._event_pipe",
        [IsProperty(), Source(r"zmq\.PUSH", r"self\._local\.event_pipe")],
        (IOPUB_THREAD_PY,),
    ).because("the calling thread's own PUSH to the IOPub thread's PULL: its wake-ups go there"),
    Row(
        "ipykernel.iostream:IOPubThread._handle_event",
        [
            Function("self", "msg"),
            Source(r"n_events\s*=\s*len\(self\._events\)", r"self\._events\.popleft\(\)"),
        ],
        (IOPUB_THREAD_PY,),
    ).because(
        "each wake-up runs every event queued by then: a wake-up skipped on a full pipe leaves "
        "its event to the next one, which that full pipe holds"
    ),
    Row(
        "ipykernel.iostream:IOPubThread._thread_main",
        [
            Source(
                r"if not self\._stopped:\s*self\.io_loop\.run_sync\(_cancel\)",
                r"self\.io_loop\.close\(all_fds=True\)",
            )
        ],
        ("tests/kernel/test_launchers.py",),
    ).because(
        "a loop stopped before stop() runs the gc task's cancel on the loop (no pending task)"
    ),
    Row(
        "ipykernel.kernelspec:make_ipkernel_cmd",
        [Accepts("mod", "executable", "extra_arguments", "python_arguments")],
        ("ipykernel_ext/install.py",),
    ).because("the kernelspec's argv"),
    Row(
        "ipykernel.kernelspec:write_kernel_spec",
        [Accepts("overrides")],
        ("ipykernel_ext/install.py",),
    ).because("stock's kernelspec with our argv and name"),
    # ipywidgets ----------------------------------------------------------------------------
    Row(
        f"{WIDGET}:_instances",
        [Value(dict)],
        (
            WIDGET_STATE_PY,
            RECONCILE_PY,
            ECHO_PY,
            "tests/kernel/test_widget_state.py",
            "benchmarks/widget_fetch.py",
            "benchmarks/widget_fetching/floors.py",
        ),
    ).because(
        "the registry of live widgets, model id to widget, copied by the thread taking a "
        "snapshot; comm_echo finds a widget's echo_update rule there"
    ),
    Row(
        f"{WIDGET}:_remove_buffers",
        [
            Function("state"),
            Probe("splits buffers as the fast path does", _remove_buffers_splits_as_we_do),
        ],
        (
            WIDGET_READER_PY,
            "tests/unit/test_widget_state_unit.py",
            "benchmarks/widget_fetching/floors.py",
        ),
    ).because("the fallback's buffer split; the fast path must give the same"),
    Row(
        f"{WIDGET}:Widget._trait_to_json",
        [Function("x", "self", kind="staticmethod")],
        (WIDGET_READER_PY,),
    ).because("the identity serializer, skipped by the fast path"),
    Row(
        f"{WIDGET}:Widget.get_state", [Function("self", "key", "drop_defaults")], (WIDGET_STATE_PY,)
    ).because("the fallback, and how the fast path knows a class overrides it"),
    Row(f"{WIDGET}:Widget.keys", [Trait("List")], (WIDGET_STATE_PY,)).because("the synced keys"),
    Row(f"{WIDGET}:Widget.comm", [Trait("Any")], (WIDGET_STATE_PY,)).because(
        "None once a widget is closed"
    ),
    Row(f"{WIDGET}:Widget._model_name", [Trait("Unicode")], (WIDGET_READER_PY,)).because(
        "update_states' model_name"
    ),
    Row(f"{WIDGET}:Widget._model_module", [Trait("Unicode")], (WIDGET_READER_PY,)).because(
        "update_states' model_module"
    ),
    Row(f"{WIDGET}:Widget._model_module_version", [Trait("Unicode")], (WIDGET_READER_PY,)).because(
        "update_states' model_module_version"
    ),
    Row(
        f"{WIDGET}:Widget.handle_control_comm_opened",
        [
            Function("comm", "msg", kind="classmethod"),
            Source(r"on_msg\(cls\._handle_control_comm_msg\)"),
        ],
        (BUSY_ROUTING_PY, CONTROL_COMM_PY, BUSY_INPROC),
    ).because(
        "the jupyter.widget.control target whose replies are matched off-thread; a comm it "
        "accepts gets _handle_control_comm_msg as its handler, which an idle kernel swaps"
    ),
    Row(f"{WIDGET}:Widget._control_comm", [Value(type(None))], (BUSY_INPROC,)).because(
        "the control comm ipywidgets keeps class-wide once handle_control_comm_opened accepts "
        "one; the in-process tests put it back to None"
    ),
    Row(f"{WIDGET}:Widget.send_state", [Function("self", "key")], (RECONCILE_PY,)).because(
        "sends what changed since an off-thread snapshot, once the cell is over"
    ),
    Row(
        f"{WIDGET}:Widget._handle_control_comm_msg",
        [Function("msg", kind="classmethod")],
        (CONTROL_COMM_PY, "benchmarks/widget_fetching/floors.py"),
    ).because(
        "recognised as a control comm's handler, swapped for ours and called for what ours does"
        " not answer; what update_states replies look like (the benchmark times its body)"
    ),
    Row(
        "ipywidgets._version:__control_protocol_version__",
        [Value(str), Probe("version 1.x", _version_major_1)],
        (BUSY_ROUTING_PY,),
    ).because("the control comm version answered off-thread"),
    # traitlets -----------------------------------------------------------------------------
    Row(
        "traitlets:HasTraits._trait_values",
        [
            Attribute(dict, _new_has_traits),
            Probe("maps each set trait's name to its value", _trait_values_hold_set_values),
        ],
        (WIDGET_READER_PY,),
    ).because("the fast path reads values there, not through descriptors"),
    Row("traitlets:TraitType.get", [Function("self", "obj", "cls")], (WIDGET_STATE_PY,)).because(
        "a trait whose class does not override get reads _trait_values plainly"
    ),
    Row(
        "traitlets:TraitType.__get__", [Function("self", "obj", "cls")], (WIDGET_READER_PY,)
    ).because("same, for the descriptor protocol"),
    Row(
        "traitlets.config.application:Application._create_loader",
        [Function("self", "argv", "aliases", "flags", "classes")],
        (APP_PY,),
    ).because("overridden to give argparse the program name users type (usage errors)"),
    Row(
        "traitlets.config.loader:KVArgParseConfigLoader",
        [Probe("passes extra keywords (prog) to argparse.ArgumentParser", _loader_passes_prog)],
        (APP_PY,),
    ).because("built with prog=PROG"),
    Row(
        "traitlets.config.application:Application.get_default_logging_config",
        [
            Function("self"),
            Probe(
                "one logger, named after the class, printed as [%(name)s]; the default log too",
                _logger_named_after_the_class,
            ),
        ],
        (APP_PY,),
    ).because("renamed to stock's IPKernelApp, with the default log"),
    Row(
        "traitlets.config.application:Application.subcommand_description",
        [Trait("Unicode")],
        (APP_PY,),
    ).because("names the program in --help (stock formats it with the app's name)"),
    # jupyter_server ------------------------------------------------------------------------
    Row(f"{WS}._open_sockets", [Value(MutableSet)], (SERVER_PY,)).because(
        "close_all() closes the connections registered there"
    ),
    Row(
        f"{WS}._limit_rate", [Function("self", "channel", "msg", "msg_list")], (SERVER_PY,)
    ).because("the stock IOPub rate limit, per websocket"),
    Row(
        f"{WS}._on_error",
        [Function("self", "channel", "msg", "msg_list"), Source(r"msg_list\[3\]\s*=")],
        (WIRE_PY,),
    ).because("traceback redaction; rewrites the content frame (index 3) of the parts in place"),
    Row(
        f"{WS}._reserialize_reply", [Function("self", "msg_or_list", "channel")], (WIRE_PY,)
    ).because("the legacy websocket encoding"),
    Row(f"{WS}.write_message", [IsProperty()], (SERVER_PY,)).because(
        "overridden: every write of the connection goes through the websocket's outbox"
    ),
    Row(
        f"{WS}.write_stderr",
        [Function("self", "error_message", "parent_header"), Source(r"self\.write_message\(")],
        (SERVER_PY,),
    ).because(
        "writes through self.write_message (so through the outbox, in order); a refused message"
        " answered on the sender's IOPub"
    ),
    Row(f"{WS}._send_status_message", [Source(r"self\.write_message\(")], (SERVER_PY,)).because(
        "restarting/dead go through self.write_message (after the flushed IOPub)"
    ),
    Row(f"{WS}.disconnect", [Function("self")], (SERVER_PY,)).because(
        "extended: the outbox is dropped and its counts logged"
    ),
    Row(f"{WS}.create_stream", [Function("self")], (SERVER_PY,)).because("overridden"),
    Row(f"{WS}.connect", [Function("self")], (SERVER_PY,)).because("overridden"),
    Row(f"{WS}.close_all", [Function(kind="classmethod")], (SERVER_PY,)).because("extended"),
    Row(
        f"{WS}.handle_outgoing_message", [Function("self", "stream", "outgoing_msg")], (SERVER_PY,)
    ).because("overridden"),
    Row(f"{WS}.handle_incoming_message", [Function("self", "incoming_msg")], (SERVER_PY,)).because(
        "extended"
    ),
    Row(f"{WS}.on_kernel_restarted", [Function("self")], (SERVER_PY,)).because("restart callback"),
    Row(f"{WS}.on_restart_failed", [Function("self")], (SERVER_PY,)).because("restart callback"),
    Row(f"{WS}.subprotocol", [IsProperty()], (WIRE_PY,)).because("which websocket encoding"),
    Row(f"{WS}.limit_rate", [Trait("Bool")], (SERVER_PY,)).because("whether to rate-limit"),
    *(
        Row(
            f"{WS}.{name}",
            [Trait("Float")],
            (PACED_PY,),
            "the pacer reads the stock rate setting under its name (the gateway class too)",
        )
        for name in ("iopub_msg_rate_limit", "iopub_data_rate_limit", "rate_limit_window")
    ),
    Row(f"{WS}.channels", [Trait("Dict")], (SERVER_PY,)).because(
        "channel name to stream; we put ChannelStream objects there"
    ),
    Row(f"{WS}.kernel_info_timeout", [Trait("Float")], (SERVER_PY,)).because(
        "how long the nudge tries"
    ),
    Row(
        f"{GWS}.connect",
        [
            Function("self", kind="async function"),
            Source(r"self\.ws_future", r"self\._read_messages\(\)"),
        ],
        (GATEWAY_PY,),
    ).because("extended: the gateway websocket of a tab, or of the server's own feed"),
    Row(
        f"{GWS}.disconnect", [Function("self"), Source(r"self\.disconnected = True")], (GATEWAY_PY,)
    ).because("extended: the owner is told the tab closed"),
    Row(
        f"{GWS}._connection_done",
        [Function("self", "fut"), Source(r"not self\.disconnected")],
        (GATEWAY_PY,),
    ).because("extended: a websocket made after its tab closed is closed, not leaked"),
    Row(f"{GWS}.handle_incoming_message", [Function("self", "message")], (GATEWAY_PY,)).because(
        "extended: what a tab sends is told to the owner, after the feed is live"
    ),
    Row(
        f"{GWS}.handle_outgoing_message", [Function("self", "incoming_msg")], (GATEWAY_PY,)
    ).because("extended: the tab's replies are told to the owner; the feed's messages go to it"),
    Row(
        f"{GWS}._read_messages",
        [
            Function("self", kind="async function"),
            Source(
                r"while self\.ws is not None",
                r"self\.ws\.read_message\(\)",
                r"if message is None",
                r"self\.handle_outgoing_message\(",
                r"loop\.spawn_callback\(self\.connect\)",
            ),
        ],
        (GATEWAY_PY, GATEWAY_LINK_PY),
    ).because(
        "every gateway message reaches handle_outgoing_message; overridden to pass binary frames "
        "on, then called for its reconnect: with the websocket closed, read_message gives None "
        "and the loop ends into the reconnect through connect() (which probes again)"
    ),
    Row(f"{GWS}.disconnected", [Trait("Bool")], (GATEWAY_PY,)).because(
        "set by disconnect(); a deferred connection sets it too"
    ),
    Row(f"{GWS}.ws", [Trait("Instance")], (SESSION_RETURN_PY,)).because(
        "the gateway websocket: a parked one is handed to its session's next connection"
    ),
    Row(f"{GWS}.ws_future", [Trait("Instance")], (SESSION_RETURN_PY,)).because(
        "handed on with the websocket; a new connection waits for it before the feed opens"
    ),
    Row(
        "jupyter_server.services.kernels.connection.base:serialize_msg_to_ws_v1",
        [Function("msg_or_list", "channel")],
        (WIRE_PY,),
    ).because("the v1 websocket encoding"),
    Row(
        f"{MKM}.get_buffer",
        [
            Function("self", "kernel_id", "session_key"),
            Probe("returns buffer, session_key, channels", _buffer_layout),
        ],
        (SERVER_PY,),
    ).because("the offline buffer of a returning session, read in connect()"),
    Row(f"{MKM}.start_buffering", [Source(r"\.on_recv\(")], (STREAMS_PY,)).because(
        "buffers through stream.on_recv(callback), which ChannelStream implements"
    ),
    Row(
        f"{MKM}.stop_buffering", [Source(r"\.socket\.closed", r"\.on_recv\(None\)")], (STREAMS_PY,)
    ).because("reads stream.socket.closed, which _SocketState implements"),
    Row(
        "jupyter_server.services.kernels.kernelmanager:emit_kernel_action_event",
        [
            Source(
                r"kernel_actions/v1",
                r'method\.__name__\.replace\("_kernel", ""\)',
                r'"status": "success"',
            )
        ],
        (SERVER_KERNELS_PY,),
    ).because(
        "restart/shutdown through the API end the running cells the server owns: the event's "
        "action is the method name without _kernel"
    ),
    Row(
        "jupyter_server.services.contents.manager:AsyncContentsManager.rename",
        [Source(r'"action": "rename", "path": new_path, "source_path": old_path')],
        (SERVER_KERNELS_PY,),
    ).because("a notebook renamed or moved: its followed cells go to the new path"),
    Row(
        "jupyter_server.services.contents.manager:ContentsManager.rename",
        [Source(r'"action": "rename", "path": new_path, "source_path": old_path')],
        (SERVER_KERNELS_PY,),
    ).because("the same for a synchronous ContentsManager"),
    Row(
        "jupyter_server.serverapp:ServerApp.kernel_websocket_connection_class",
        [Trait("Type")],
        (EXTENSION_PY,),
    ).because("set by the server extension unless configured (installed is on)"),
    Row(
        "jupyter_server.serverapp:ServerApp.init_webapp",
        [Source(r"kernel_websocket_connection_class=self\.kernel_websocket_connection_class")],
        (EXTENSION_PY,),
    ).because(
        "puts the class into web_app.settings before extensions load, so the extension sets the"
        " setting too"
    ),
    Row(
        "jupyter_server.services.kernels.websocket:KernelWebsocketHandler."
        "kernel_websocket_connection_class",
        [Source(r'self\.settings\.get\("kernel_websocket_connection_class"\)')],
        (EXTENSION_PY,),
    ).because("each websocket reads the class from the settings when it opens"),
    Row(
        "jupyter_server.serverapp:ServerWebApplication.init_settings",
        [Source(r'"session_manager": session_manager')],
        ("ipykernel_ext/server/keep_outputs.py",),
    ).because(
        "a jupyter_server's settings hold its session manager; an app without one (standalone"
        " Voila) gets no outputs keeping"
    ),
    Row(
        "jupyter_server.gateway.gateway_client:GatewayClient.gateway_enabled",
        [IsProperty()],
        (EXTENSION_PY,),
    ).because("gateway mode keeps the gateway class"),
    Row(f"{MKM}.notify_connect", [Function("self", "kernel_id")], (SERVER_PY,)).because(
        "called as the stock connect() does"
    ),
    Row(f"{MKM}.allow_tracebacks", [Trait("Bool")], (WIRE_PY,)).because(
        "whether tracebacks are redacted"
    ),
    Row(
        f"{MKM}.track_message_type", [Function("self", "message_type")], (SERVER_KERNELS_PY,)
    ).because("which statuses set the server's execution_state"),
    Row(
        f"{MKM}.untracked_message_types",
        [Trait("List"), Probe("defaults to protocol.UNTRACKED_MESSAGE_TYPES", _untracked_as_ours)],
        (
            SERVER_KERNELS_PY,
            "ipykernel_ext/protocol.py",
            "ipykernel_ext/kernel/busy/main_shell_status.py",
        ),
    ).because(
        "the same rule on servers without track_message_type; the kernel's copy (it must not "
        "import jupyter_server): no busy again after the idle of the cell's own client's "
        "request of such a type"
    ),
    Row(f"{MKM}._async_start_kernel", [Source(r"\.execution_state\s*=")], (SERVER_PY,)).because(
        "the server keeps kernel_manager.execution_state, read to skip the nudge when busy"
    ),
    # jupyter_client ------------------------------------------------------------------------
    Row(f"{LOCAL_PROVISIONER}.ports_cached", [Value(bool)], (LASTING_PROVISIONER_PY,)).because(
        "set before pre_launch, so a taken-back kernel's recorded ports are kept, not new ones"
    ),
    Row(
        f"{LOCAL_PROVISIONER}.pre_launch",
        [Source(r"km\.cache_ports and not self\.ports_cached", r"km\.curve_publickey is None")],
        (LASTING_PROVISIONER_PY,),
    ).because(
        "pre_launch writes the connection file from the manager's ports and CurveZMQ keys, "
        "picking new ones only when none are set: a taken-back kernel's loaded ones are kept"
    ),
    Row(f"{LOCAL_PROVISIONER}.has_process", [IsProperty()], (LASTING_PROVISIONER_PY,)).because(
        "a taken-back kernel has no Popen: the property is overridden to count its pid"
    ),
    Row(
        f"{LOCAL_PROVISIONER}.poll",
        [Function("self", kind="async function"), Source(r"if self\.process")],
        (LASTING_PROVISIONER_PY,),
    ).because(
        "stock's poll calls a provisioner without a Popen dead (0), so a taken-back kernel's "
        "poll, wait, send_signal, kill and terminate work on its pid instead"
    ),
    Row(
        "jupyter_client.launcher:launch_kernel",
        [Accepts("independent", "env")],
        (LASTING_PROVISIONER_PY,),
    ).because("independent=True: no JPY_PARENT_PID, so the kernel outlives its server"),
    Row(
        "jupyter_client.multikernelmanager:MultiKernelManager.remove_kernel",
        [Function("self", "kernel_id")],
        (LASTING_STOPPING_PY,),
    ).because("a kept kernel leaves the manager without a shutdown, so shutdown_all skips it"),
    Row(
        "jupyter_server.services.sessions.sessionmanager:SessionManager.row_to_model",
        [Source(r"delete_session")],
        (LASTING_ADOPTION_PY,),
    ).because(
        "a session row whose kernel the server does not know is deleted when read: sessions "
        "are put back only after their kernel was taken back"
    ),
    Row(
        "jupyter_server.services.kernels.connection.channels:"
        "ZMQChannelsWebsocketConnection.request_kernel_info",
        [Source(r"self\.kernel_manager\._kernel_info_future")],
        (LASTING_ADOPTION_PY,),
    ).because(
        "a kernel's kernel_info is asked once per kernel manager and shared by its websockets "
        "(_kernel_info_future); a kernel taken back gets the one asked on control, since on "
        "shell its running cell's own tab would be answered only after the cell"
    ),
    Row(
        "jupyter_server.serverapp:ServerApp.init_signal",
        [Source(r"signal\.signal\(signal\.SIGTERM, self\._signal_stop\)")],
        (LASTING_STOPPING_PY,),
    ).because(
        "stock's SIGTERM handler, put in before extensions load: ours replaces it when SIGTERM "
        "keeps the kernels (and SIGUSR2, which stock leaves alone, always does)"
    ),
    Row(
        "ipykernel.kernelapp:IPKernelApp.init_poller",
        [Source(r"parent_handle != 1")],
        (APP_PY,),
    ).because(
        "pid 1 (init) as the parent is never polled: a kernel launched to outlive its server "
        "records it, and ipykernel then prints no console note into the server's terminal"
    ),
    Row(
        "ipykernel.kernelapp:IPKernelApp.log_connection_info",
        [Source(r"if not self\.parent_handle")],
        (APP_PY,),
    ).because("the console note is printed only for a kernel without a parent handle"),
    Row(
        "jupyter_client.connect:ConnectionFileMixin._make_url",
        [Function("self", "channel")],
        ("tests/unit/test_endpoints.py", "ipykernel_ext/endpoints.py"),
    ).because("the endpoint rule a routing id must match byte for byte"),
    Row(
        "jupyter_client.connect:ConnectionFileMixin._create_connected_socket",
        [Function("self", "channel", "identity")],
        ("ipykernel_ext/endpoints.py",),
    ).because("the CurveZMQ client rule endpoints.apply_curve_client is checked against"),
    Row(
        "jupyter_client.client:KernelClient._created_context",
        [Trait("Bool"), Attribute(bool, _new_kernel_client)],
        ("benchmarks/many_kernels.py",),
    ).because("whether the client owns its context, so the benchmark may destroy it"),
    Row(
        "jupyter_client.session:Session.digest_history",
        [Trait("Set")],
        (MAIN_SHELL_PY,),
    ).because(
        "a comm message put back in the inbox after its signature was checked (an interrupt "
        "before its busy) has the signature forgotten, else its dispatch is refused as a replay"
    ),
    Row(
        "jupyter_client.session:json_packer",
        [Source(r"allow_nan=False", r"json_clean")],
        ("ipykernel_ext/kernel/widgets/buffers.py",),
    ).because("check_packable predicts what the json packer accepts: json.dumps, else json_clean"),
    # matplotlib (the test extra; imported only if the user's code imported it) ---------------
    Row("matplotlib._pylab_helpers:Gcf.figs", [Value(dict)], (CELL_EVENTS_PY,)).because(
        "pyplot's open figures by number, in activation order: a callback handled mid-cell sees "
        "only its own (the cell's set aside, then put back), so its plt.show() or interact "
        "shows and closes its figures alone"
    ),
    Row(
        "matplotlib_inline.backend_inline:flush_figures",
        [Source(r"show\._draw_called", r"show\._to_draw")],
        (CELL_EVENTS_PY,),
    ).because(
        "the inline backend notes what was drawn since its last flush on its show function; "
        "a callback's flush (interact) clears it, so the cell's note is kept and put back"
    ),
    Row("ipympl.backend_nbagg:_Backend_ipympl._to_show", [Value(list)], (CELL_EVENTS_PY,)).because(
        "ipympl (%matplotlib widget) displays the figures listed here at the next post_execute; "
        "a callback's, handled mid-cell, is displayed under its comm message and taken off it"
    ),
    Row(
        "matplotlib_inline.backend_inline:InlineBackend.close_figures",
        [Trait("Bool")],
        (CELL_EVENTS_PY,),
    ).because("a callback's figure shown mid-cell is closed after, as the inline flush does"),
    # pyzmq -----------------------------------------------------------------------------------
    Row(
        "zmq:Context._sockets",
        [Attribute(MutableSet, _new_zmq_context)],
        ("benchmarks/many_kernels.py",),
    ).because("counting a context's open sockets"),
]


# --- the checker ----------------------------------------------------------------------------


def resolve(row: Row, import_module: ImportModule = importlib.import_module) -> tuple[Any, Any]:
    """``(owner, value)`` of the row's name; raises LookupError saying what is missing."""
    try:
        owner: Any = import_module(row.module)
    except ImportError as exc:
        raise LookupError(f"module {row.module} cannot be imported ({exc})") from exc
    parts = row.qualname.split(".")
    for index, part in enumerate(parts):
        if isinstance(owner, type) and index == len(parts) - 1 and _is_instance_attribute(row):
            return owner, None  # set in __init__: the shape checks a new instance
        value = getattr(owner, part, _MISSING)
        if value is _MISSING and isinstance(owner, type) and index == len(parts) - 1:
            traits = owner.class_traits() if hasattr(owner, "class_traits") else {}
            value = traits.get(part, _MISSING)
        if value is _MISSING:
            where = ".".join([row.module, *parts[:index]])
            raise LookupError(f"{where} has no attribute {part!r}")
        if index == len(parts) - 1:
            return owner, value
        owner = value
    raise AssertionError("unreachable")  # pragma: no cover


def _is_instance_attribute(row: Row) -> bool:
    return all(isinstance(s, (Attribute, Probe)) for s in row.shapes) and any(
        isinstance(s, Attribute) for s in row.shapes
    )


def check(row: Row, import_module: ImportModule = importlib.import_module) -> list[str]:
    """What no longer holds of ``row`` (empty if everything does)."""
    try:
        owner, value = resolve(row, import_module)
    except LookupError as exc:
        return [f"is gone: {exc}"]
    found: list[str] = []
    for shape in row.shapes:
        found += shape.problems(owner, row.name, value)
    return found


def failure_message(row: Row, problems: list[str]) -> str:
    expected = "; ".join(shape.describe() for shape in row.shapes)
    return (
        f"{row.path} {' and '.join(problems)}.\n"
        f"  We rely on it being: {expected} ({row.why}).\n"
        f"  Used by: {', '.join(row.users)}.\n"
        "  Adapt those files to the new shape (or pin the package), then update this row."
    )


# --- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", CONTRACT, ids=lambda row: row.path)
def test_upstream_name_has_the_shape_we_rely_on(row: Row) -> None:
    problems = check(row)
    assert not problems, failure_message(row, problems)


@pytest.mark.parametrize("row", CONTRACT, ids=lambda row: row.path)
def test_users_mention_the_name(row: Row) -> None:
    """The table follows the code: each user file exists and names what it relies on."""
    for user in row.users:
        path = ROOT / user
        assert path.exists(), f"{row.path}: user file {user} does not exist; update the row"
        name = row.name if row.name != "__init__" else row.qualname.split(".")[-2]
        text = path.read_text()
        assert name in text or _mentions_shape(row, text), (
            f"{row.path}: {user} does not mention {name!r} any more; drop it from the row's "
            "users (or the row, if nothing uses the name)"
        )


def _mentions_shape(row: Row, text: str) -> bool:
    # An __init__ row is about what the constructor sets: the user mentions that instead.
    for shape in row.shapes:
        if isinstance(shape, Source):
            return any(word in text for word in _identifiers(shape.patterns))
    return False


def _identifiers(patterns: tuple[str, ...]) -> set[str]:
    words = {
        word
        for pattern in patterns
        for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]{3,}", re.sub(r"\\[A-Za-z]", " ", pattern))
    }
    return words - {"self"}  # in every file: it would prove nothing


def test_the_checker_names_a_renamed_name_and_our_file() -> None:
    """Renaming a listed name upstream fails with the name and the file of ours using it."""
    row = next(r for r in CONTRACT if r.path == f"{WIDGET}:_remove_buffers")
    renamed = types.ModuleType(WIDGET)
    renamed._remove_buffers_v2 = lambda state: (state, [], [])  # type: ignore[attr-defined]  # a stand-in module

    problems = check(row, import_module=lambda name: renamed)

    message = failure_message(row, problems)
    assert problems == [f"is gone: {WIDGET} has no attribute '_remove_buffers'"]
    assert "_remove_buffers" in message and WIDGET_READER_PY in message


def test_the_checker_names_a_changed_signature() -> None:
    row = next(r for r in CONTRACT if r.path == f"{KERNEL}._publish_status")
    changed = types.ModuleType("ipykernel.kernelbase")

    class Kernel:
        def _publish_status(self, state: str, channel: str, parent: Any = None) -> None: ...

    changed.Kernel = Kernel  # type: ignore[attr-defined]  # a stand-in module
    problems = check(row, import_module=lambda name: changed)
    assert len(problems) == 1 and "expected (self, status, channel, parent" in problems[0]
    assert KERNEL_PY in failure_message(row, problems)


def test_the_checker_sees_a_new_required_parameter_and_a_changed_kind() -> None:
    def with_required(state: Any, strict: bool) -> Any: ...

    assert Function("state").problems(None, "f", with_required) == [
        "has a new required parameter 'strict': (state: 'Any', strict: 'bool') -> 'Any'"
    ]

    class Owner:
        @staticmethod
        def handler(msg: Any) -> None: ...

    assert Function("msg", kind="classmethod").problems(Owner, "handler", Owner.handler) == [
        "is a staticmethod, not a classmethod"
    ]
