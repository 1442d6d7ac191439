#!/usr/bin/env bash
# Installs what the browser tests (tests/browser/) and
# benchmarks/browser_restore.py need: Debian's chromium (apt) and the Python packages that
# serve and drive the pages (the "browser" extra: jupyterlab, notebook, voila, playwright, and
# ipympl for the %matplotlib widget test, plotly and anywidget for the FigureWidget test).
#
# Playwright's Python wheel ships its own driver (node + the playwright library), so nothing
# else is fetched: we never run `playwright install`; the test launches /usr/bin/chromium.
#
# Usage: bash .ci/install-browser.sh [PYTHON]   (default: python on PATH)
set -euo pipefail

PYTHON="${1:-python}"
export DEBIAN_FRONTEND=noninteractive

if ! command -v chromium >/dev/null 2>&1; then
    apt-get update
    apt-get install -y --no-install-recommends chromium fonts-dejavu-core
fi
chromium --version

"$PYTHON" -m pip install --quiet "jupyterlab>=4.2" "notebook>=7.2" "voila>=0.5" "playwright>=1.45" "ipympl>=0.10" "plotly>=6" "anywidget>=0.9"
"$PYTHON" -c "import jupyterlab, notebook, voila, playwright
print('jupyterlab', jupyterlab.__version__, 'notebook', notebook.__version__, 'voila', voila.__version__)"
