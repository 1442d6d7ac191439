"""Taking the binary buffers out of a widget state, as ipywidgets' ``_remove_buffers`` does.

Owned here: :func:`split_buffers` (one value, the buffers appended to the caller's lists, so
the snapshot of :mod:`ipykernel_ext.kernel.widgets.snapshot` splits every widget in one pass),
:func:`remove_buffers` (a whole state, ipywidgets' signature) and :func:`check_packable` (what
the session's JSON packer would refuse, found before the whole reply fails on it).
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_client.jsonutil import json_clean, json_default

BINARY_TYPES = (memoryview, bytearray, bytes)
CONTAINER_TYPES = (dict, list, tuple)
#: Exact types that can neither be nor contain a buffer: stored without a second look.
PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def split_buffers(
    value: Any, path: list[Any], buffer_paths: list[list[Any]], buffers: list[Any]
) -> Any:
    """``value`` with its binary parts taken out, as ipywidgets' ``_remove_buffers`` does.

    A buffer in a dict removes its key, one in a list or tuple leaves ``None`` (so positions
    stay); a container is copied only when something in it changes, never mutated in place.
    """
    if isinstance(value, dict):
        entries: Any = value.items()
        copy: type = dict
    elif isinstance(value, (list, tuple)):
        entries, copy = enumerate(value), list
    else:
        return value
    out = value
    keys_checked = copy is not dict
    for key, item in entries:
        if not keys_checked and type(key) is not str:
            check_packable(dict.fromkeys(value))  # keys JSON has to turn into strings
            keys_checked = True
        if type(item) in PLAIN_TYPES:
            continue
        if isinstance(item, BINARY_TYPES):
            new = None
            buffer_paths.append([*path, key])
            buffers.append(item)
        elif isinstance(item, CONTAINER_TYPES):
            new = split_buffers(item, [*path, key], buffer_paths, buffers)
            if new is item:
                continue
        else:
            check_packable(item)
            continue
        if out is value:
            out = copy(value)
        if new is None and copy is dict:
            del out[key]  # a dict's buffer leaves no key; a list's leaves None in its place
        else:
            out[key] = new
    return out


def remove_buffers(state: dict[str, Any]) -> tuple[Any, list[list[Any]], list[Any]]:
    """``(state without buffers, buffer_paths, buffers)``, as ipywidgets' function of that name."""
    buffer_paths: list[list[Any]] = []
    buffers: list[Any] = []
    return split_buffers(state, [], buffer_paths, buffers), buffer_paths, buffers


def check_packable(value: Any) -> None:
    """Raise if the session's JSON packer could not pack ``value``.

    Only values of other types than JSON's own and the buffers get here (dates, enums, numpy
    scalars, ...): one of them that cannot be packed would otherwise fail the whole reply when
    the session packs it. This follows jupyter_client's ``json_packer``: ``json.dumps`` with
    ``json_default``, else ``json_clean`` (which raises for what it cannot clean).
    """
    if isinstance(value, (str, int, float)):  # subclasses (numpy scalars, IntEnum) pack as such
        return
    try:
        json.dumps(value, default=json_default, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        json_clean(value)
