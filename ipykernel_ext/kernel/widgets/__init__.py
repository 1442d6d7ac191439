"""Every ipywidgets model's state in one reply (docs/PROTOCOL.md section 3).

* :mod:`.snapshot`: the snapshot of every model, as ipywidgets' ``update_states`` carries it,
  for ``widget_state_request`` (control thread), the mid-cell answers (a worker of the
  shell-channel thread) and ipywidgets' control comm and the check after the cell (main
  thread), which may all take one at once;
* :mod:`.reader`: how each widget's state is read, fast with a plan per class, and safely
  (ipywidgets' own ``get_state``) when that fails;
* :mod:`.buffers`: binary values split from the state as ipywidgets does;
* :mod:`.control_comm`: ipywidgets' ``jupyter.widget.control`` comm answered with the snapshot
  on an idle kernel;
* :mod:`.reconcile`: after a mid-cell snapshot, the frontend brought up to date once the cell
  is over.

``ipywidgets`` is never imported here: it is read from ``sys.modules`` once the user's code
imported it.
"""
