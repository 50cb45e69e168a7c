#!/usr/bin/env bash
# Creates benches/peers/.venv and installs the pinned peer frameworks from PyPI.
# Idempotent: when the venv already has the pinned versions it returns at once.
# Not part of CI (it needs PyPI).
set -euo pipefail

LANGGRAPH_VERSION="1.2.24"
AUTOGEN_CORE_VERSION="0.7.5"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv" >&2
    "$python" -m venv "$venv"
fi

have() {
    "$venv/bin/python" - "$1" "$2" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
}

if have langgraph "$LANGGRAPH_VERSION" && have autogen-core "$AUTOGEN_CORE_VERSION"; then
    echo "setup: langgraph $LANGGRAPH_VERSION and autogen-core $AUTOGEN_CORE_VERSION already installed" >&2
    exit 0
fi

echo "setup: installing langgraph==$LANGGRAPH_VERSION autogen-core==$AUTOGEN_CORE_VERSION" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "langgraph==$LANGGRAPH_VERSION" "autogen-core==$AUTOGEN_CORE_VERSION"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
print("setup: installed langgraph", version("langgraph"), "autogen-core", version("autogen-core"))
PY
