"""The harness the tests and the benchmarks share: real kernels, servers, browsers and links.

Not part of the package (the wheel ships ``ipykernel_ext`` only) and never imported by it.
Neither ``harness`` nor ``benchmarks`` imports ``tests`` (tests/package/test_layering.py). The
checkout root must be on ``sys.path``: pytest puts it there (``pythonpath`` in pyproject.toml),
and the benchmarks run as ``python -m benchmarks`` from the checkout root. One concern per
module:

* :mod:`.polling`: waiting until something holds (the one polling loop; a hang guard, never
  a verdict), which the named waits of the modules below are built on;
* :mod:`.kernels`: kernels started and shut down, their clients, their IOPub counters;
* :mod:`.thread_cpu`: a kernel process's CPU time thread by thread (where a request's cost
  goes);
* :mod:`.messages`: requests and replies on a client, and waiting on IOPub (barriers);
* :mod:`.cells`: running a cell: to its idle and collected (``run_cell``, the one runner of
  the tests, the benchmarks and the demo), to completion, for a value, or held running;
* :mod:`.subshells`: shell messages on a kernel subshell, as JupyterLab sends comm messages;
* :mod:`.widget_control`: ipywidgets' control comm, as its manager drives it;
* :mod:`.bursts`: the IOPub bursts (cells, collection, settings);
* :mod:`.raw_subscriber`: a bare ``zmq.SUB`` on a kernel's IOPub;
* :mod:`.iopub_witness`: a client of a server's kernel itself, to wait until the kernel has
  published a text (what the server holds back from a tab is then known);
* :mod:`.inproc`: kernel pieces in the test process (a frontend, our IOPub socket and thread);
* :mod:`.netns`: a network namespace behind a veth pair, and a rate limit on it;
* :mod:`.burst_reader`: a burst read in a process of its own (a script);
* :mod:`.logged_process`: a subprocess with its log in a temporary folder of its own,
  started, waited for and stopped (the base of the three below);
* :mod:`.server`: a real jupyter_server or JupyterLab in a subprocess, and pauses of it;
* :mod:`.voila`: standalone ``voila NOTEBOOK`` in a subprocess, configured by
  ``python -m ipykernel_ext install --prefix``;
* :mod:`.gateway`: a real Jupyter Enterprise Gateway in a venv of its own, for gateway mode;
* :mod:`.ws_protocol`: the kernel websocket protocol (v1 framing, legacy JSON, the message
  dict), one rule per fact for every client below;
* :mod:`.kernel_websocket`: a synchronous websocket client of a kernel through that server;
* :mod:`.journal`: a lasting kernel's cell journal, asked on its control channel;
* :mod:`.simulated_clock`: simulated time for the server's IOPub pacer (hours in seconds);
* :mod:`.tab_view`: what a tab shows after a cell's messages (outputs, widget states);
* :mod:`.cell_messages`: a cell's IOPub messages as dicts, and the outputs a page keeps;
* :mod:`.async_websocket`: websocket clients, many in one asyncio event loop;
* :mod:`.relay_client`: a logical client of the relay used as a library (SharedChannels);
* :mod:`.shared_channels_server`: that server with the shared-channels connection class, and
  the connections its kernels hold;
* :mod:`.outputs_notebook`: a notebook whose cell prints lines paced by barrier files, through
  a real server (the outputs-survive-the-tab tests, local kernels and a gateway's);
* :mod:`.browser`: headless Chromium and what a user does in JupyterLab and Notebook 7;
* :mod:`.page_websocket`: a page's own kernel websocket, read from outside;
* :mod:`.package_source`: the package read as source (its modules, what each imports);
* :mod:`.outputs_cells`: the cell *code* of the outputs browser tests and the nbmodel
  benchmark, and the marker files that pace it (:mod:`.cells` runs cells; this writes them);
* :mod:`.callback_cells`: the cell code the widget-callback tests share (counters and a probe
  of where the kernel's main thread is);
* :mod:`.browser_outputs`: what a notebook page and its ``.ipynb`` show of a cell's outputs;
* :mod:`.browser_subshell`: the slider scenario (a widget moved in a page while a cell draws);
* :mod:`.server_extensions`: server extensions the server loads for tests and benchmarks (its
  ``__init__`` lists them).

``tests/package/test_docs_lists.py`` fails on a module missing here.
"""
