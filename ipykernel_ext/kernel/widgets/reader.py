"""How a widget's state is read for a snapshot: fast, from any thread, and safely when that fails.

:class:`StateReader` reads the widgets of one snapshot (:mod:`.snapshot` builds the reply
around it) with a :class:`ClassPlan` per widget class, cached. It is used by every thread that
takes a snapshot at the same time (see :mod:`.snapshot`): what it changes after it is made
(the plan cache, the classes whose fast-path failure was logged) is changed under its lock; a
cache lookup is one dict read and reading a widget takes no lock.

Speed. ``Widget.get_state`` asks traitlets for each key's ``to_json`` metadata on every call
and reads every value through the trait descriptor; that is most of the comm path's cost. Here
a :class:`ClassPlan` resolves each class's keys, serializers and trait descriptors once, the
values are read from the instance's ``_trait_values`` dict, and the binary buffers are split
off in the same pass (only values that can hold a buffer are walked), giving the same result
as ``get_state`` followed by ipywidgets' ``_remove_buffers``. A widget whose class overrides
``get_state`` or that carries per-instance trait metadata takes ``get_state`` itself.

Fail-safe. The fast path leans on internals (traitlets' ``_trait_values``, the descriptors,
``Widget._trait_to_json``; tests/package/test_contract.py lists them). Any exception it raises for
a widget sends that widget down the slow path: ``widget.get_state()`` and ipywidgets' own
``_remove_buffers``, exactly what ipywidgets' ``update_states`` does. So an ipywidgets or
traitlets upgrade that breaks the fast path costs speed, never a state; only a widget whose
``get_state`` itself fails (or whose state the session could not pack) becomes an ``errors``
entry. The first fast-path failure of each widget class that the slow path then reads fine
is logged once, as a warning, so that the breakage is heard of.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .buffers import (
    BINARY_TYPES,
    CONTAINER_TYPES,
    PLAIN_TYPES,
    check_packable,
    remove_buffers,
    split_buffers,
)

#: How many times the registry copy and one widget's read are retried when the main thread
#: mutates a dict while it is being copied ("dictionary changed size during iteration").
RETRIES = 3

#: Plans are cached per widget class; ``add_traits`` makes a class per instance, so the cache
#: is bounded and simply emptied when full (a reader's default ``plan_cache_max``).
PLAN_CACHE_MAX = 1024

Serializer = Callable[[Any, Any], Any]


class ClassPlan:
    """What reading one widget class's state takes, resolved once per class and key list.

    ``entries`` holds, per synced key in ``keys`` order: the key, the name under which the
    value sits in ``_trait_values`` (``None`` when the attribute must go through ``getattr``:
    not a plain traitlets descriptor) and the ``to_json`` serializer (``None`` for
    ipywidgets' identity serializer, which is skipped).
    """

    __slots__ = ("entries", "keys", "meta_direct", "overridden", "per_instance")

    def __init__(self, widget: Any, keys: list[str], module: Any) -> None:
        from traitlets import TraitType  # traitlets is loaded: ipywidgets imported it

        cls = type(widget)
        identity = module.Widget._trait_to_json
        self.keys = list(keys)
        #: The class reads its state its own way: call its ``get_state``.
        self.overridden = cls.get_state is not module.Widget.get_state
        #: Instance attributes that would change what ``trait_metadata`` answers.
        self.per_instance = frozenset(
            ["_trait_to_json", "get_state", "trait_metadata"] + [f"_{k}_metadata" for k in keys]
        )
        entries: list[tuple[str, str | None, Serializer | None]] = []
        for key in keys:
            to_json = widget.trait_metadata(key, "to_json", widget._trait_to_json)
            trait = getattr(cls, key, None)
            direct = (
                isinstance(trait, TraitType)
                and trait.name == key
                and type(trait).get is TraitType.get
                and type(trait).__get__ is TraitType.__get__
            )
            entries.append((key, key if direct else None, None if to_json is identity else to_json))
        self.entries = entries
        #: ``_model_name``, ``_model_module``, ``_model_module_version`` are plain traits whose
        #: values ``get_state`` has put in ``_trait_values`` (so reading them there is exact).
        plain = {key for key, name, _ in entries if name is not None}
        self.meta_direct = {"_model_name", "_model_module", "_model_module_version"} <= plain


class StateReader:
    """Reads widgets' states in a tight loop with per-class plans (see the module docstring).

    Used by every thread that takes a snapshot, at the same time. What it changes after it is
    made, the plan cache and the classes whose fast-path failure was logged, is changed under
    ``_lock``; a cache lookup is one dict read and takes no lock, nor does reading a widget.
    """

    def __init__(self, module: Any, plan_cache_max: int = PLAN_CACHE_MAX) -> None:
        self.module = module
        self.widget_class = module.Widget
        #: Each widget class's plan, at most ``plan_cache_max`` of them.
        self.plans: dict[Any, ClassPlan] = {}
        self.plan_cache_max = plan_cache_max
        #: Widget classes (by qualified name) whose fast-path failure was logged.
        self.fast_path_failures: set[str] = set()
        self._lock = threading.Lock()

    def plan_for(self, widget: Any, keys: list[str]) -> ClassPlan:
        cls = type(widget)
        plan = self.plans.get(cls)
        if plan is not None and plan.keys == keys:
            return plan
        # Made outside the lock (it asks the class for its traits' metadata); two threads may
        # both make one for a new class, and the first stored is kept: they are the same plan.
        plan = ClassPlan(widget, keys, self.module)
        # A key list that differs from the class's usual one is an instance's own: keep the
        # first plan of each class cached and build the odd one each time.
        with self._lock:
            if cls not in self.plans:
                if len(self.plans) >= self.plan_cache_max:
                    self.plans.clear()
                self.plans[cls] = plan
        return plan

    def read(
        self,
        items: list[tuple[str, Any]],
        states: dict[str, Any],
        buffer_paths: list[list[Any]],
        buffers: list[Any],
        errors: dict[str, dict[str, str]],
        missing: list[str],
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> None:
        """Fill ``states``/``buffer_paths``/``buffers`` for ``items`` (model id, widget);
        ``log`` gets the once-per-class warning of a fast-path failure."""
        read_one = self.read_one
        for model_id, widget in items:
            mark = len(buffers)
            try:
                entry = read_one(model_id, widget, buffer_paths, buffers)
            except Exception as exc:
                del buffer_paths[mark:], buffers[mark:]
                entry = self.read_after_failure(
                    model_id, widget, buffer_paths, buffers, exc, errors, log
                )
            if entry is None:
                missing.append(model_id)
            else:
                states[model_id] = entry

    def read_after_failure(
        self,
        model_id: str,
        widget: Any,
        buffer_paths: list[list[Any]],
        buffers: list[Any],
        exc: Exception,
        errors: dict[str, dict[str, str]],
        log: logging.Logger | logging.LoggerAdapter[Any],
    ) -> dict[str, Any] | None:
        """After ``read_one`` raised ``exc``: the fast path once more if the main thread
        resized a dict mid-read ("dictionary changed size during iteration"), else (or if
        that fails too) the slow path, :meth:`read_slowly`."""
        if isinstance(exc, RuntimeError):
            mark = len(buffers)
            try:
                return self.read_one(model_id, widget, buffer_paths, buffers)
            except Exception as again:
                del buffer_paths[mark:], buffers[mark:]
                exc = again
        entry = self.read_slowly(model_id, widget, buffer_paths, buffers, errors)
        if model_id not in errors:
            self.report_fast_path_failure(type(widget), exc, log)
        return entry

    def read_slowly(
        self,
        model_id: str,
        widget: Any,
        buffer_paths: list[list[Any]],
        buffers: list[Any],
        errors: dict[str, dict[str, str]],
    ) -> dict[str, Any] | None:
        """One widget's entry as ipywidgets' ``update_states`` builds it: ``get_state()``,
        then ipywidgets' ``_remove_buffers``. Public names only, but for that one function
        (ours stands in if ipywidgets drops it). A failure here is the widget's own: it
        goes to ``errors``."""
        split_all = getattr(self.module, "_remove_buffers", None) or remove_buffers
        for attempt in range(RETRIES):
            try:
                if widget.comm is None:
                    return None  # closed meanwhile
                state, paths, found = split_all(widget.get_state())
                check_packable(state)
                entry = {
                    "model_name": widget._model_name,
                    "model_module": widget._model_module,
                    "model_module_version": widget._model_module_version,
                    "state": state,
                }
                break
            except RuntimeError as exc:  # a dict resized by the main thread mid-read
                if attempt == RETRIES - 1:
                    errors[model_id] = {"ename": type(exc).__name__, "evalue": str(exc)}
                    return None
            except Exception as exc:
                errors[model_id] = {"ename": type(exc).__name__, "evalue": str(exc)}
                return None
        buffer_paths.extend([model_id, "state", *path] for path in paths)
        buffers.extend(found)
        return entry

    def report_fast_path_failure(
        self, cls: type, exc: Exception, log: logging.Logger | logging.LoggerAdapter[Any]
    ) -> None:
        """Warn once per widget class that the fast path failed where ``get_state`` worked."""
        name = f"{cls.__module__}.{cls.__qualname__}"
        with self._lock:
            if name in self.fast_path_failures:
                return
            self.fast_path_failures.add(name)
        log.warning(
            "widget_state: the fast read of %s widgets failed (%s: %s); they are read with "
            "get_state() instead: same states, slower. An ipywidgets or traitlets upgrade may "
            "have changed an internal that tests/package/test_contract.py lists. Logged once "
            "per class.",
            name,
            type(exc).__name__,
            exc,
        )

    def read_one(
        self, model_id: str, widget: Any, buffer_paths: list[list[Any]], buffers: list[Any]
    ) -> dict[str, Any] | None:
        """One widget's ``update_states`` entry; ``None`` if it was closed meanwhile."""
        values: dict[str, Any] = widget._trait_values
        if values.get("comm") is None:
            return None
        keys = values.get("keys")
        if keys is None:
            keys = widget.keys
        plan = self.plan_for(widget, keys)
        if plan.overridden or not plan.per_instance.isdisjoint(widget.__dict__):
            state = widget.get_state()
            root = [model_id, "state"]
            state = split_buffers(state, root, buffer_paths, buffers)
        else:
            state = {}
            for key, name, to_json in plan.entries:
                if name is None:
                    value = getattr(widget, key)
                else:
                    try:
                        value = values[name]
                    except KeyError:  # a dynamic default never computed yet
                        value = getattr(widget, key)
                if to_json is not None:
                    value = to_json(value, widget)
                kind = type(value)
                if kind in PLAIN_TYPES:
                    state[key] = value
                elif isinstance(value, BINARY_TYPES):
                    buffer_paths.append([model_id, "state", key])
                    buffers.append(value)
                elif isinstance(value, CONTAINER_TYPES):
                    state[key] = split_buffers(
                        value, [model_id, "state", key], buffer_paths, buffers
                    )
                else:
                    check_packable(value)
                    state[key] = value
        if plan.meta_direct:
            return {
                "model_name": values["_model_name"],
                "model_module": values["_model_module"],
                "model_module_version": values["_model_module_version"],
                "state": state,
            }
        return {
            "model_name": widget._model_name,
            "model_module": widget._model_module,
            "model_module_version": widget._model_module_version,
            "state": state,
        }
