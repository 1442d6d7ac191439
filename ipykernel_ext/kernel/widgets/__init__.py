"""Every ipywidgets model's state in one reply (docs/PROTOCOL.md section 3).

* :mod:`.snapshot`: the snapshot of every model, as ipywidgets' ``update_states`` carries it,
  for ``widget_state_request`` (control thread), the mid-cell answers (shell-channel thread)
  and ipywidgets' control comm (main thread);
* :mod:`.buffers`: binary values split from the state as ipywidgets does;
* :mod:`.control_comm`: ipywidgets' ``jupyter.widget.control`` comm answered with the snapshot
  on an idle kernel;
* :mod:`.reconcile`: after a mid-cell snapshot, the frontend brought up to date once the cell
  is over.

``ipywidgets`` is never imported here: it is read from ``sys.modules`` once the user's code
imported it.
"""
