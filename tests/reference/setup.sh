#!/usr/bin/env bash
# Idempotent: create tests/reference/.venv with torch==2.11.0 and numpy from PyPI if it is missing.
# Not needed by CI (CI uses the committed JSON files in data/).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, numpy, sys; sys.exit(0 if torch.__version__.startswith("2.11.0") else 1)' 2>/dev/null; then
    echo "venv ok: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
    exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --upgrade pip
"$VENV/bin/python" -m pip install "torch==2.11.0" numpy
"$VENV/bin/python" -c 'import torch, numpy; print("installed torch", torch.__version__, "numpy", numpy.__version__)'
