"""A jupyter_server extension for tests: drives ipykernel_ext.server.outputs' writers in a real
server.

The writers run where they will run for real: inside a jupyter_server, on its event loop,
against jupyter-collaboration's live rooms and the server's own ContentsManager. The test
sends the IOPub messages of one cell (plain dicts, as a kernel publishes them); the handler
folds them with a :class:`KernelOutputs` and, after each message that changed the cell,
writes it with :class:`CollabWriter`, recording every change the document's cell sees (the
events a receiving tab would get). Never part of the package.

* ``POST /outputs-test/collab`` ``{path, cell_id, messages, create}`` ->
  ``{outputs, execution_count, writes, events}``; with ``probe``: one write with
  ``create=False`` -> ``{available, wrote}``
* ``GET /outputs-test/doc?path=`` -> the live document's cells, with ``execution_state``
* ``POST /outputs-test/contents`` ``{path, cells: {cell_id: [outputs, execution_count]}}`` ->
  ``{written, manager}`` (the ContentsManager's class name)
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ipykernel_ext.server.outputs import CollabWriter, ContentsWriter, KernelOutputs, find_cell


def _plain(value: Any) -> Any:
    if hasattr(value, "to_py"):
        return value.to_py()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class CollabHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        body = json.loads(self.request.body)
        path, cell_id = body["path"], body["cell_id"]
        writer = CollabWriter(self.settings)
        if body.get("probe"):  # a write of nothing, creating no room: does it reach a cell?
            wrote = await writer.write(path, cell_id, [], None, "idle", create=False)
            self.finish(json.dumps({"available": writer.available, "wrote": wrote}))
            return
        doc = await writer.document(path, create=body.get("create", True))
        if doc is None:
            raise web.HTTPError(404, f"no room for {path}")
        events: list[list[dict[str, Any]]] = []

        def record(batch: Any) -> None:
            events.append(
                [
                    {
                        "path": list(e.path),
                        "delta": _plain(getattr(e, "delta", None)),
                        "keys": _plain(getattr(e, "keys", None)),
                    }
                    for e in batch
                ]
            )

        ycell = find_cell(doc, cell_id)
        subscription = ycell.observe_deep(record)
        kernel = KernelOutputs(**body.get("bounds", {}))
        kernel.on_execute_request(
            {
                "header": {"msg_id": "req", "session": "tab", "msg_type": "execute_request"},
                "metadata": {"cellId": cell_id},
            }
        )
        cell = kernel.cells["req"]
        writes = 0
        try:
            for msg in body["messages"]:
                if "req" in kernel.on_iopub(msg):
                    await writer.write(
                        path, cell_id, cell.outputs.to_nbformat(), cell.execution_count, cell.state
                    )
                    writes += 1
        finally:
            ycell.unobserve(subscription)
        self.finish(
            json.dumps(
                {
                    "outputs": cell.outputs.to_nbformat(),
                    "writes": writes,
                    "execution_count": cell.execution_count,
                    "events": events,
                }
            )
        )


class DocHandler(APIHandler):
    @web.authenticated
    async def get(self) -> None:
        writer = CollabWriter(self.settings)
        doc = await writer.document(self.get_argument("path"))
        if doc is None:
            raise web.HTTPError(404, "no room")
        self.finish(json.dumps({"cells": [ycell.to_py() for ycell in doc.ycells]}))


class ContentsHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        body = json.loads(self.request.body)
        writer = ContentsWriter(self.settings["contents_manager"])
        cells = {k: (v[0], v[1]) for k, v in body["cells"].items()}
        written = await writer.write(body["path"], cells)
        manager = type(self.settings["contents_manager"]).__name__
        self.finish(json.dumps({"written": written, "manager": manager}))


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "outputs_extension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "outputs-test/collab"), CollabHandler),
            (url_path_join(base, "outputs-test/doc"), DocHandler),
            (url_path_join(base, "outputs-test/contents"), ContentsHandler),
        ],
    )
