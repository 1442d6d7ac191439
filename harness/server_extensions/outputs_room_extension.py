"""A jupyter_server extension for tests: a notebook's live collaborative document, read as JSON.

``GET /outputs-room/doc?path=nb.ipynb[&open=1]`` -> ``{"cells": [...]}``, each cell with its
``outputs``, ``execution_count`` and ``execution_state`` as the shared document holds them
(what every tab of the notebook shows). ``open=1`` opens the room if none is (as a tab that
opens the notebook does: jupyter-collaboration's ``get_document(create=True)``); without it,
404 when no room is open. Never part of the package.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web


class DocHandler(APIHandler):
    @web.authenticated
    async def get(self) -> None:
        ext = self.settings["jupyter_server_ydoc"]
        doc = await ext.get_document(
            path=self.get_argument("path"),
            content_type="notebook",
            file_format="json",
            copy=False,
            create=self.get_argument("open", "0") == "1",
        )
        if doc is None:
            raise web.HTTPError(404, "no room")
        self.finish(json.dumps({"cells": [ycell.to_py() for ycell in doc.ycells]}))


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "outputs_room_extension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, "outputs-room/doc"), DocHandler)])
