"""widget_state_request on the control channel (PROTOCOL.md section 3), on real kernels.

Every kernel runs with CurveZMQ. "Exactly what ipywidgets sends" is checked against the
``update_states`` reply of ipywidgets' own ``jupyter.widget.control`` comm on the same kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import AsyncKernelClient

from harness.cells import busy_cell, evaluate, run
from harness.kernels import EXT_KERNEL, running_kernel
from harness.messages import control_request, iopub_until_barrier, shell_reply
from harness.polling import wait_until
from harness.widget_control import fetch_ipywidgets_update_states
from ipykernel_ext.client import WidgetStateError, fetch_widget_states

# Hang guard per test (default 120 s): kernel starts plus widget bursts and their fetches.
pytestmark = pytest.mark.timeout(180)

BUTTONS = """
import ipywidgets as w
buttons = [w.Button(description=f"button {i}", tooltip=str(i)) for i in range(1000)]
grid = w.GridBox(buttons, layout=w.Layout(grid_template_columns="repeat(25, 80px)"))
"""

# Widgets whose states hold buffers (top level, in lists, tuples, nested dicts), dates, a
# class with its own get_state, an instance with add_traits, and a serializer that can fail.
ODD_WIDGETS = """
import datetime, os
import ipywidgets as w
from traitlets import Bytes, Dict, Int, List, Unicode

class Blob(w.DOMWidget):
    _model_name = Unicode("BlobModel").tag(sync=True)
    _model_module = Unicode("blob-module").tag(sync=True)
    _model_module_version = Unicode("0.1.0").tag(sync=True)
    data = Bytes(b"").tag(sync=True)
    parts = List().tag(sync=True)
    nested = Dict().tag(sync=True)

class OwnState(w.Widget):
    value = Int(3).tag(sync=True)
    def get_state(self, key=None, drop_defaults=False):
        state = super().get_state(key, drop_defaults)
        if "value" in state:
            state["value"] = state["value"] * 10
        return state

FAIL = [False]
def _fragile_to_json(value, widget):
    if FAIL[0]:
        raise ValueError("serializer refuses")
    return value

class Fragile(w.Widget):
    text = Unicode("fine").tag(sync=True, to_json=_fragile_to_json)

class Opaque(w.Widget):  # a value no JSON packer takes, once FAIL is set
    thing = Unicode("x").tag(sync=True, to_json=lambda v, _: [1, object()] if FAIL[0] else v)

image = w.Image(value=os.urandom(100_000), format="png")
blob = Blob(
    data=bytes(range(256)) * 4,
    parts=[b"\\x00\\x01", 7, {"deep": bytearray(b"xyz"), "n": None}, (b"in-a-tuple", "a")],
    nested={"a": {"b": memoryview(b"mv-bytes")}, "c": [1, 2]},
)
own = OwnState()
extra = w.IntSlider(value=4)
extra.add_traits(more=Int(5).tag(sync=True))
dates = w.DatePicker(value=datetime.date(2024, 2, 29))
fragile = Fragile()
opaque = Opaque()
ids = {name: obj.model_id for name, obj in dict(image=image, blob=blob, own=own, extra=extra,
       dates=dates, fragile=fragile, opaque=opaque).items()}
"""


# --- helpers -------------------------------------------------------------------------------


def request(kc: Any, content: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = control_request(kc, "widget_state_request", content, timeout=60)
    assert reply["msg_type"] == "widget_state_reply"
    return reply


def update_states(kc: Any) -> tuple[dict[str, Any], list[Any], list[bytes]]:
    """ipywidgets' own answer: request_states on a jupyter.widget.control comm, answered by
    ipywidgets' handler (an idle ExtKernel would answer it with the snapshot under test)."""
    got = fetch_ipywidgets_update_states(kc)
    return got["states"], got["buffer_paths"], got["buffers"]


def assert_same_states(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Equal, in the same order; on failure name the first model that differs (a diff of
    3000 states would take pytest a minute to render)."""
    assert list(ours) == list(theirs), "not the same model ids (or order)"
    for model_id, state in theirs.items():
        if ours[model_id] != state:
            assert ours[model_id] == state, model_id


@pytest.fixture(scope="module")
def ext(ext_kernel: Any) -> Any:
    """The shared kernel with the Buttons made and their IOPub read."""
    run(ext_kernel[1], BUTTONS)
    iopub_until_barrier(ext_kernel[1])
    return ext_kernel


# --- what the reply holds ------------------------------------------------------------------


def test_1000_buttons_same_as_update_states(ext: Any) -> None:
    kc = ext[1]
    info = kc.kernel_info(reply=True, timeout=30)["content"]
    assert "widget_state" in info["supported_features"]  # the feature is advertised
    theirs, their_paths, their_buffers = update_states(kc)
    reply = request(kc)
    content = reply["content"]
    assert content["status"] == "ok"
    assert len(theirs) == 3002
    assert_same_states(content["states"], theirs)
    assert content["buffer_paths"] == their_paths == []
    assert reply["buffers"] == their_buffers == []
    assert content["missing"] == []
    assert content["errors"] == {}
    names = {s["model_name"] for s in content["states"].values()}
    assert names == {"ButtonModel", "ButtonStyleModel", "LayoutModel", "GridBoxModel"}


@dataclass
class OddWidgets:
    """:data:`ODD_WIDGETS` made on the shared kernel, and what was asked of them."""

    ids: dict[str, str]  # name in the cell -> model id
    theirs: tuple[dict[str, Any], list[Any], list[bytes]]  # ipywidgets' update_states
    reply: dict[str, Any]  # our widget_state_reply for every model
    fetched: dict[str, Any]  # fetch_widget_states for the blob and the image: their states
    image_value: bytes


@pytest.fixture(scope="module")
def odd(ext: Any) -> OddWidgets:
    """The odd widgets made and asked for once; the tests below each check one thing."""
    kc = ext[1]
    run(kc, ODD_WIDGETS)
    ids = evaluate(kc, "ids")
    iopub_until_barrier(kc)
    theirs = update_states(kc)
    reply = request(kc)
    fetched = fetch_widget_states(kc, [ids["blob"], ids["image"]])["states"]
    return OddWidgets(ids, theirs, reply, fetched, evaluate(kc, "bytes(image.value)"))


def test_odd_widgets(odd: OddWidgets) -> None:
    """Answered as ipywidgets' own update_states; binary traits are buffers at their paths; a
    widget's own get_state, added traits and serializers count; the client helper puts every
    buffer back byte for byte (top level, in lists, tuples, nested dicts)."""
    content = odd.reply["content"]
    their_states, their_paths, their_buffers = odd.theirs
    assert content["status"] == "ok", content
    assert_same_states(content["states"], their_states)
    assert content["buffer_paths"] == their_paths, "not ipywidgets' buffer paths"
    assert [bytes(b) for b in odd.reply["buffers"]] == their_buffers, "not ipywidgets' buffers"
    paths, states = content["buffer_paths"], content["states"]
    blob, image = odd.ids["blob"], odd.ids["image"]
    assert [blob, "state", "data"] in paths, paths
    assert [image, "state", "value"] in paths, paths
    assert states[odd.ids["own"]]["state"]["value"] == 30, "not the widget's own get_state"
    assert states[odd.ids["extra"]]["state"]["more"] == 5, "a trait added with add_traits"
    date = {"year": 2024, "month": 1, "date": 29}
    assert states[odd.ids["dates"]]["state"]["value"] == date, "not ipywidgets' date serializer"
    assert set(odd.fetched) == {blob, image}
    assert bytes(odd.fetched[image]["state"]["value"]) == odd.image_value
    got = odd.fetched[blob]["state"]
    assert bytes(got["data"]) == bytes(range(256)) * 4
    parts = got["parts"]
    assert (bytes(parts[0]), parts[1]) == (b"\x00\x01", 7)
    assert (bytes(parts[2]["deep"]), parts[2]["n"]) == (b"xyz", None)
    assert (bytes(parts[3][0]), parts[3][1]) == (b"in-a-tuple", "a")
    assert bytes(got["nested"]["a"]["b"]) == b"mv-bytes"
    assert got["nested"]["c"] == [1, 2]


EVERY_CLASS = """
import datetime, inspect
import ipywidgets as w
made = []
for name in dir(w):
    cls = getattr(w, name)
    if inspect.isclass(cls) and issubclass(cls, w.Widget):
        try:
            made.append(cls())
        except Exception:
            pass  # abstract or needs arguments
made += [
    w.DatetimePicker(value=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)),
    w.TimePicker(value=datetime.time(1, 2, 3)),
    w.Dropdown(options=[("a", 1), ("b", 2)], value=2),
    w.SelectMultiple(options=["x", "y"], value=["y"]),
    w.FloatRangeSlider(value=(1.5, 3.5)),
    w.Audio(value=b"abc"),
    w.Tab([w.Label("x")], titles=["t"]),
    w.interactive(lambda x: x, x=3),
]
"""


def test_every_ipywidgets_class_same_as_update_states(ext: Any) -> None:
    kc = ext[1]
    run(kc, EVERY_CLASS)
    assert evaluate(kc, "len(made)") > 60
    iopub_until_barrier(kc)
    theirs, their_paths, their_buffers = update_states(kc)
    reply = request(kc)
    assert_same_states(reply["content"]["states"], theirs)
    assert reply["content"]["buffer_paths"] == their_paths
    assert [bytes(b) for b in reply["buffers"]] == their_buffers


def test_failing_serializer_reported_others_kept(ext: Any, odd: OddWidgets) -> None:
    """``odd``: the cell that defines ``FAIL``, ``ids`` and the fragile widgets has run."""
    kc = ext[1]
    run(kc, "FAIL[0] = True")
    try:
        ids = evaluate(kc, "ids")
        content = request(kc)["content"]
        assert content["status"] == "ok"
        fragile, opaque = ids["fragile"], ids["opaque"]
        assert set(content["errors"]) == {fragile, opaque}
        assert content["errors"][fragile] == {"ename": "ValueError", "evalue": "serializer refuses"}
        assert "Can't clean for JSON" in content["errors"][opaque]["evalue"]
        assert set(content["missing"]) == {fragile, opaque}
        assert fragile not in content["states"]
        assert len(content["states"]) == evaluate(kc, "len(w.widgets.widget._instances)") - 2
        # asked for alone, it is an error entry too, and the kernel goes on
        alone = request(kc, {"model_ids": [fragile]})["content"]
        assert alone["states"] == {}
        assert alone["missing"] == [fragile]
        assert set(alone["errors"]) == {fragile}
    finally:
        run(kc, "FAIL[0] = False")


def test_subset_with_unknown_ids(ext: Any) -> None:
    kc = ext[1]
    known = evaluate(kc, "[grid.model_id, buttons[0].model_id, buttons[999].layout.model_id]")
    asked = [known[1], "no-such-model", known[0], known[2], "another", known[0]]
    reply = request(kc, {"model_ids": asked})
    content = reply["content"]
    assert content["status"] == "ok"
    assert list(content["states"]) == [known[1], known[0], known[2]]
    assert content["missing"] == ["no-such-model", "another"]
    assert content["states"][known[0]]["model_name"] == "GridBoxModel"
    assert content["states"][known[1]]["state"]["description"] == "button 0"
    assert content["states"][known[2]]["model_name"] == "LayoutModel"
    none = request(kc, {"model_ids": []})["content"]
    assert (none["states"], none["missing"]) == ({}, [])


def test_helper_raises_on_error_reply(ext: Any) -> None:
    with pytest.raises(WidgetStateError, match="list of strings") as caught:
        fetch_widget_states(ext[1], ["ok", 3], timeout=30)  # type: ignore[list-item]  # a non-string id on purpose: refused
    assert caught.value.ename == "WidgetStateRequestError"
    assert caught.value.traceback


def test_empty_kernel_and_no_ipywidgets() -> None:
    with running_kernel(EXT_KERNEL) as (_, kc):
        assert evaluate(kc, "'ipywidgets' in __import__('sys').modules") is False
        empty = {"status": "ok", "states": {}, "buffer_paths": [], "missing": [], "errors": {}}
        assert request(kc)["content"] == empty
        assert request(kc, {"model_ids": ["a"]})["content"]["missing"] == ["a"]
        # the request did not import ipywidgets either
        assert evaluate(kc, "'ipywidgets' in __import__('sys').modules") is False
        run(kc, "import ipywidgets")
        content = request(kc)["content"]
        assert (content["status"], content["states"], content["missing"]) == ("ok", {}, [])


# --- on the control thread ----------------------------------------------------------------


def test_full_reply_while_a_cell_runs(ext: Any, tmp_path: Path) -> None:
    """The reply comes while the cell is still running: the cell cannot end before it is
    released, after the reply (a barrier, not a time limit on the reply)."""
    _km, kc = ext
    iopub_until_barrier(kc)
    with busy_cell(kc, tmp_path) as cell:
        reply = fetch_widget_states(kc, timeout=60)
        assert len(reply["states"]) >= 3002
    shell_reply(kc, cell.msg_id)


def test_async_client(ext: Any) -> None:
    km, kc = ext
    grid = evaluate(kc, "grid.model_id")

    async def go() -> dict[str, Any]:
        # parent=km: liveness from the process, not a 1 s heartbeat (see harness.kernels.new_client)
        akc = AsyncKernelClient(parent=km, connection_file=km.connection_file)
        akc.load_connection_file()
        akc.start_channels()
        try:
            await akc.wait_for_ready(timeout=60)
            return await fetch_widget_states(akc, [grid, "nope"], timeout=30)
        finally:
            akc.stop_channels()

    reply = asyncio.run(go())
    assert list(reply["states"]) == [grid]
    assert reply["missing"] == ["nope"]


def test_timeout_raises() -> None:
    """No reply (a kernel that is gone) ends in TimeoutError, not a hang."""
    with running_kernel(EXT_KERNEL) as (km, kc):
        km.shutdown_kernel(now=True)
        with pytest.raises(TimeoutError):
            fetch_widget_states(kc, timeout=1)


# Hang guard: 50 widget_state requests while a cell makes and closes widgets.
@pytest.mark.timeout(240)
def test_50_requests_while_widgets_come_and_go(tmp_path: Path) -> None:
    # The cell says when its first round is done, so the requests meet widgets coming and
    # going however slowly the loop starts (a fixed sleep could end before it started).
    first_round = tmp_path / "first-round-done"
    # The cell ends when this file appears: a marker, not an interrupt (a SIGINT that lands
    # inside the comm machinery can be lost on a loaded machine, and the cell then runs on).
    stop_file = tmp_path / "stop-churning"
    with running_kernel(EXT_KERNEL) as (_km, kc):
        run(
            kc,
            "import ipywidgets as w, os, time\n"
            "stable = [w.Button(description=str(i)) for i in range(200)]\n"
            "stable_ids = [b.model_id for b in stable]",
        )
        stable_ids = set(evaluate(kc, "stable_ids"))
        churn = kc.execute(
            "box = w.VBox()\n"
            "rounds = 0\n"
            f"while not os.path.exists({str(stop_file)!r}):\n"
            "    made = [w.IntSlider(value=i) for i in range(20)]\n"
            "    box.children = made\n"
            "    for s in made[::2]:\n"
            "        s.value += 1\n"
            "        s.layout.width = f'{s.value}px'\n"
            "    box.children = made[10:]\n"
            "    for s in made:\n"
            "        s.style.close(); s.layout.close(); s.close()\n"
            "    rounds += 1\n"
            f"    if rounds == 1: open({str(first_round)!r}, 'w').close()\n"
        )
        # IOPub must be read or the kernel's sends wait: a thread drains it meanwhile.
        stop = threading.Event()

        def drain_until_stopped() -> None:
            while not stop.is_set():
                with contextlib.suppress(queue.Empty):
                    kc.get_iopub_msg(timeout=0.1)

        drainer = threading.Thread(target=drain_until_stopped, daemon=True)
        drainer.start()
        try:
            wait_until(first_round.exists, 120, "the churn loop's first round", 0.01)
            for _ in range(50):
                content = request(kc)["content"]
                assert content["status"] == "ok", content
                assert stable_ids <= set(content["states"])
                for model_id, error in content["errors"].items():
                    assert model_id in content["missing"]
                    assert set(error) == {"ename", "evalue"}
                assert len(content["buffer_paths"]) == 0
        finally:
            stop_file.touch()
            while kc.get_shell_msg(timeout=120)["parent_header"].get("msg_id") != churn:
                pass
            stop.set()
            drainer.join()
        iopub_until_barrier(kc)
        # the loop really ran while the requests were answered
        assert evaluate(kc, "rounds") > 0
