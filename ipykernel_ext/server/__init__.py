"""The jupyter_server side: kernel websockets on shared channels, and outputs that survive the tab.

:class:`SharedChannelsConnection` is jupyter_server's kernel websocket on one set of ZMQ
channels per kernel; :class:`GatewayOutputsConnection` its gateway websocket; the installed
server extension picks one, and both keep a departed tab's outputs (:mod:`.outputs`).

Stock jupyter_server (``ZMQChannelsWebsocketConnection``) opens shell, control, stdin and
IOPub sockets for every websocket: twenty browser tabs on one notebook are eighty sockets at
the kernel, and every IOPub message is encrypted, sent, received and decrypted twenty times.
This connection class keeps one :class:`~ipykernel_ext.shared_channels.SharedChannels` per
kernel and attaches every websocket of that kernel to it::

    jupyter server \\
      --ServerApp.kernel_websocket_connection_class=ipykernel_ext.server.SharedChannelsConnection

What stays exactly as with the stock class (it is inherited, not rewritten): both websocket
protocols (``v1.kernel.websocket.jupyter.org`` and the legacy JSON one), the traceback
redaction, ``restarting``/``dead`` statuses on kernel restarts, replacing a stale websocket of
the same session, buffering messages while the last websocket of a kernel is away and
replaying them when the same session comes back, and the signatures (a client's messages are
signed by its connection's Session, as before).

What changes:

* the IOPub rate (per websocket, stock's settings): a websocket over it gets what waits
  merged and paced (:mod:`.pacer`, :mod:`.merging`, options in :mod:`.paced_iopub`), never
  dropped; ``iopub_merge=False`` brings stock's dropping limiter back;
* replies (shell, control, stdin) are routed by ``parent_header.session`` instead of by a
  socket per client. A session id belongs to one websocket at a time: a websocket that opens
  with the ``session_id`` of another *takes it over* (jupyter_server already closes the older
  one as stale; this makes sure no reply goes to it meanwhile), and a message whose
  ``header.session`` another websocket of the kernel owns or owned is refused with an error
  on the sender's IOPub (a stderr stream) rather than sent, so one client can never receive
  another's replies;
* a ``comm_echo`` is not sent to the websocket whose session caused it
  (``deliver_own_comm_echo`` turns that off);
* the kernel_info "nudge" that checks the sockets are live runs once per channel set, not once
  per websocket, with the channels' own session (its replies reach nobody);
* the channels close ``shared_channels_grace_period`` seconds after the last websocket (and
  the offline buffer, if any) lets go of them;
* each IOPub message is decoded and encoded for the websocket once, not once per websocket;
* a websocket that joins a kernel whose channels are already open gets the kernel's last
  ``status`` whose parent jupyter_server tracks (``MappingKernelManager.track_message_type``),
  exactly as the kernel sent it: it joins an existing IOPub subscription, so the kernel cannot
  greet it, and a page reloaded mid-cell shows "Busy" rather than "Unknown";
* if the shared channels stop (a receiving loop failed), every websocket on them is closed
  with code 1011 and the reason, so frontends reconnect (JupyterLab does on any close it did
  not ask for) and get a fresh channel set instead of waiting on a deaf one;
* the shared IOPub socket's receive queue holds ``shared_iopub_rcvhwm`` messages (set before
  it connects), so libzmq drains the kernel whatever the loop does, and every websocket has
  its own ordered outgoing queue (:mod:`ipykernel_ext.server.outbox`): a slow
  websocket holds only itself; one whose buffer would pass ``websocket_buffer_limit`` bytes
  is closed with code 1013 and a logged warning (the frontend reconnects), so what it costs
  the server is bounded by the limit plus one message.

Kernels behind a gateway (``--gateway-url``) have no ZMQ channels on this server:
:class:`GatewayOutputsConnection` (:mod:`.gateway`) is jupyter_server's gateway websocket
whose tabs' outputs survive the tab too. The settings of outputs that survive the tab are
one mixin of both classes, :class:`KeepOutputs` (:mod:`.keep_outputs`), and the installed
server extension (:mod:`.extension`) picks the class.

The package, a module per concept:

* :mod:`.connection`: :class:`SharedChannelsConnection`, the websocket's side (attach, relay,
  encode);
* :mod:`.outbox`: one websocket's bounded, ordered outgoing queue;
* :mod:`.pacer`: one websocket's IOPub pacing, and :mod:`.merging`: the rules that fold
  what waits; :mod:`.paced_iopub`: their options (:class:`PacedIOPub`, both classes' mixin);
* :mod:`.kernels`: what the server process keeps per kernel: its channel set and its outputs
  owner, and the server events they are told of;
* :mod:`.keep_outputs`: :class:`KeepOutputs`, the options of outputs that survive the tab;
* :mod:`.gateway`: :class:`GatewayOutputsConnection`, and :mod:`.gateway_link`: the
  server's own websocket to a gateway kernel;
* :mod:`.extension`: the server extension that picks the class;
* :mod:`.outputs`: the server's model of followed cells' outputs, and its writers.

They build on :mod:`ipykernel_ext.shared_channels`, which knows nothing of jupyter_server.
"""

from .connection import CLOSE_INTERNAL_ERROR, V1_PROTOCOL, SharedChannelsConnection
from .gateway import GatewayOutputsConnection
from .keep_outputs import KeepOutputs
from .outbox import CLOSE_TOO_SLOW, MAX_CLOSE_REASON
from .paced_iopub import PacedIOPub

__all__ = [
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_TOO_SLOW",
    "MAX_CLOSE_REASON",
    "V1_PROTOCOL",
    "GatewayOutputsConnection",
    "KeepOutputs",
    "PacedIOPub",
    "SharedChannelsConnection",
]
