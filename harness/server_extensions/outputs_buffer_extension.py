"""A jupyter_server extension for tests: what the server holds for a kernel's departed session.

``GET /outputs-buffer?kernel_id=K&msg_id=M`` -> counts over jupyter_server's offline buffer of
kernel ``K`` (the messages kept for the session whose websocket left last) and the state of
its outputs owner (``SharedChannelsConnection.keep_outputs``; ``outputs_owners.find``):

* ``buffering``: whether an offline buffer exists for the kernel;
* ``outputs``: buffered output messages (``stream``, ``display_data``, ...) of request ``M``;
  ``outputs_decoded``: how many of them carry a decoded content (``KernelMessage.cache``);
* ``others``: other buffered messages of request ``M`` (statuses, ``execute_input``, replies);
* ``skipped``: messages the buffer was not given because the owner hides them from that
  session (``SharedClient.skipped_diverted``);
* ``owner``: whether the kernel has an outputs owner; ``owned`` / ``hidden``: whether request
  ``M`` is a cell the server owns / wrote into the live document.

Read-only: it reads the server's state and changes nothing. Never part of the package.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ipykernel_ext.server.kernels import outputs_owners
from ipykernel_ext.server.outputs import OUTPUT_TYPES
from ipykernel_ext.shared_channels import KernelMessage


class BufferHandler(APIHandler):
    @web.authenticated
    def get(self) -> None:
        kernel_id = self.get_argument("kernel_id")
        msg_id = self.get_argument("msg_id", "")
        manager = self.settings["kernel_manager"]
        # a defaultdict: get, never index (that would make an empty buffer)
        info = manager._kernel_buffers.get(kernel_id, {})
        buffered = [m for _, m in info.get("buffer", []) if isinstance(m, KernelMessage)]
        mine = [m for m in buffered if m.parent_header.get("msg_id") == msg_id]
        outputs = [m for m in mine if m.channel == "iopub" and m.msg_type in OUTPUT_TYPES]
        streams = list((info.get("channels") or {}).values())
        owner = outputs_owners.find(kernel_id)
        self.finish(
            json.dumps(
                {
                    "buffering": bool(info),
                    "outputs": len(outputs),
                    "outputs_decoded": sum("content" in m.cache for m in outputs),
                    "others": len(mine) - len(outputs),
                    "skipped": streams[0].client.skipped_diverted if streams else 0,
                    "owner": owner is not None,
                    "owned": owner is not None and msg_id in owner.writer.owned,
                    "hidden": owner is not None and msg_id in owner.writer.hidden,
                }
            )
        )


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "outputs_buffer_extension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, "outputs-buffer"), BufferHandler)])
