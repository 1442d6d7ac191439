"""The server extension: installing the package turns the shared channels and the outputs
that survive the tab on.

``pip install ipykernel-ext`` puts ``etc/jupyter/jupyter_server_config.d/ipykernel_ext.json``
into the environment (pyproject's shared-data; the file is ``jupyter-config/`` in the
checkout), which enables the server extension ``ipykernel_ext`` in every jupyter_server app
started there (JupyterLab, Notebook 7, ``jupyter server``), the way jupyter-collaboration
and the other server extensions are switched on. jupyter_server finds it through
``ipykernel_ext._jupyter_server_extension_points`` (which imports nothing) and calls
:func:`_load_jupyter_server_extension` here once the web application is built.

What loading does:

* makes :class:`~ipykernel_ext.server.SharedChannelsConnection` the server's kernel
  websocket connection class, **unless the user configured one** (command line or any config
  file: ``ServerApp.kernel_websocket_connection_class`` is in the server's config), which
  wins as it would without us;
* in gateway mode (``--gateway-url``: kernels run behind a gateway, the server has no ZMQ
  channels of theirs) makes :class:`~ipykernel_ext.server.GatewayOutputsConnection`
  (jupyter_server's ``GatewayWebSocketConnection``, whose tabs' outputs survive the tab) the
  class, unless the user configured one; a configured ``SharedChannelsConnection`` cannot
  reach a gateway kernel (its cells would show no output at all), so it is replaced by its
  gateway counterpart, with a warning in the log saying why;
* makes the kernels whose kernelspec says they end themselves once orphaned (ours) outlive a
  server that dies, and takes back, before the server listens, those a server before it left
  running (:mod:`.lasting`; not in gateway mode, where the gateway keeps its kernels);
* logs, once the server has loaded every extension, what is on: the class, whether
  outputs survive the tab and where they are written, and whether kernels outlive the server.

Off: ``jupyter server extension disable ipykernel_ext`` (kept in the user's config), or for
one run ``--ServerApp.jpserver_extensions="{'ipykernel_ext': False}"``: the server is then
stock (unless the class is configured explicitly).

The class is read by jupyter_server in two places: ``init_webapp`` puts the trait's value into
``web_app.settings`` (each kernel websocket handler reads it from there when it opens), and
``_cleanup`` calls the trait's ``close_all`` at shutdown. Extensions are loaded after
``init_webapp``, so both are set here; no websocket is open before the server listens.
"""

from __future__ import annotations

import logging
from typing import Any

from traitlets.config.loader import DeferredConfig

from .gateway import GatewayOutputsConnection
from .lasting import install as install_lasting_kernels
from .websocket import SharedChannelsConnection
from .websocket.tabless import Tabless

#: The name users enable and disable (``jpserver_extensions`` key, ``jupyter server extension``).
EXTENSION_NAME = "ipykernel_ext"

#: The trait of ServerApp this extension sets.
CLASS_TRAIT = "kernel_websocket_connection_class"

#: What a user types to configure our classes (the log quotes them).
OUR_CLASS = "ipykernel_ext.server.SharedChannelsConnection"
OUR_GATEWAY_CLASS = "ipykernel_ext.server.GatewayOutputsConnection"

#: The settings key jupyter-collaboration's extension puts itself under.
COLLAB_SETTINGS_KEY = "jupyter_server_ydoc"


def _class_name(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}" if isinstance(cls, type) else str(cls)


def configured_class(serverapp: Any) -> Any:
    """The connection class the user configured (None: left to the default).

    traitlets keeps what the command line and every config file set in ``serverapp.config``;
    a default is never there.
    """
    section = serverapp.config.get("ServerApp")
    if section is None or CLASS_TRAIT not in section:
        return None
    return section[CLASS_TRAIT]


def gateway_enabled(serverapp: Any) -> bool:
    """Whether the server runs its kernels through a gateway (``--gateway-url``)."""
    gateway = getattr(serverapp, "gateway_config", None)
    return bool(gateway is not None and gateway.gateway_enabled)


def _set_class(serverapp: Any, cls: Any) -> None:
    setattr(serverapp, CLASS_TRAIT, cls)  # validated (a BaseKernelWebsocketConnection)
    serverapp.web_app.settings[CLASS_TRAIT] = getattr(serverapp, CLASS_TRAIT)


def _is_ours(cls: Any, ours: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, ours)


def choose_class(serverapp: Any, log: logging.Logger | logging.LoggerAdapter[Any]) -> bool:
    """Set the server's connection class (module docstring); whether one of ours is in use."""
    configured = configured_class(serverapp)
    current = getattr(serverapp, CLASS_TRAIT)
    if gateway_enabled(serverapp):
        if _is_ours(current, SharedChannelsConnection):
            # Ours opens ZMQ channels to the kernel's ports; a gateway kernel has none here.
            log.warning(
                "ipykernel_ext: %s=%s cannot serve kernels behind a gateway (--gateway-url: "
                "the kernels' ZMQ channels are on the gateway's side, so its cells would "
                "show no output); using %s, its gateway counterpart, instead",
                CLASS_TRAIT,
                _class_name(current),
                OUR_GATEWAY_CLASS,
            )
            _set_class(serverapp, GatewayOutputsConnection)
            return True
        if configured is not None:
            return _is_ours(current, GatewayOutputsConnection)
        _set_class(serverapp, GatewayOutputsConnection)
        return True
    if configured is not None:
        return _is_ours(current, SharedChannelsConnection)  # the user's choice
    _set_class(serverapp, SharedChannelsConnection)
    return True


def keep_outputs_setting(serverapp: Any) -> bool:
    """``keep_outputs`` of the server's connection class as configured (default: on)."""
    cls = getattr(serverapp, CLASS_TRAIT)
    trait = cls.class_traits()["keep_outputs"]
    value: Any = trait.default_value
    config = serverapp.config
    # traitlets applies a parent class's section, then the class's own (the subclass wins).
    for klass in reversed(cls.mro()):
        name = klass.__name__
        if name in config and "keep_outputs" in config[name]:
            value = config[name]["keep_outputs"]
    if isinstance(value, DeferredConfig):
        # The command line keeps a class the app does not know as a string until that
        # class reads it ("False" is not false).
        value = value.get_value(trait)
    return bool(value)


def collab_live(serverapp: Any) -> bool:
    """Whether tabs open notebooks as live documents (jupyter-collaboration loaded, and not
    turned off for the frontend with ``--YDocExtension.disable_rtc=True``)."""
    settings = serverapp.web_app.settings
    page_config = settings.get("page_config_data") or {}
    return settings.get(COLLAB_SETTINGS_KEY) is not None and not page_config.get("disableRTC")


def describe(serverapp: Any) -> str:
    """What is on, in one line (logged once the server has loaded every extension)."""
    cls = getattr(serverapp, CLASS_TRAIT)
    off = f"Off: --ServerApp.jpserver_extensions=\"{{'{EXTENSION_NAME}': False}}\""
    gateway = _is_ours(cls, GatewayOutputsConnection)
    if not (gateway or _is_ours(cls, SharedChannelsConnection)):
        return (
            f"ipykernel_ext: outputs that survive the tab are off (kernel websockets: "
            f"{_class_name(cls)}, configured)"
        )
    if not keep_outputs_setting(serverapp):
        outputs = "off (KeepOutputs.keep_outputs=False)"
    elif collab_live(serverapp):
        outputs = "on, written into the live document (jupyter-collaboration)"
    else:
        outputs = "on, written into the .ipynb once the cell ended (no collaboration)"
    if gateway:
        name = OUR_GATEWAY_CLASS if cls is GatewayOutputsConnection else _class_name(cls)
        return (
            f"ipykernel_ext: kernels behind the gateway ({name}); outputs survive the tab: "
            f"{outputs}. {off}"
        )
    name = OUR_CLASS if cls is SharedChannelsConnection else _class_name(cls)
    return (
        f"ipykernel_ext: every tab of a kernel on one set of channels ({name}); outputs "
        f"survive the tab: {outputs}. {off}"
    )


def lasting_kernels(serverapp: Any, log: logging.Logger | logging.LoggerAdapter[Any]) -> str:
    """Kernels that outlive the server (:mod:`.lasting`), unless kernels run behind a
    gateway (the gateway keeps its own); what is on, in words for the log."""
    if gateway_enabled(serverapp):
        return "off (kernels run behind the gateway, which keeps its own)"
    cls = getattr(serverapp, CLASS_TRAIT)
    hearing = Tabless(cls, serverapp) if _is_ours(cls, SharedChannelsConnection) else None
    return install_lasting_kernels(serverapp, log, hearing)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Called by jupyter_server once the web application is built (module docstring)."""
    log = serverapp.log
    choose_class(serverapp, log)
    # Before the server listens: the kernels a server before this one left running are
    # taken back here, so no tab is told its kernel is gone.
    lasting = lasting_kernels(serverapp, log)
    # jupyter-collaboration loads after us (extensions load in name order): say what is on
    # once every extension is in, on the server's first loop turn.
    serverapp.io_loop.add_callback(
        lambda: log.info("%s Kernels outlive a server that dies: %s", describe(serverapp), lasting)
    )
