#!/usr/bin/env bash
# Builds quorate in release, sets up the peers' venv (PyPI), runs quorate, LangGraph and
# AutoGen-core on the same workloads and prints the table; writes benches/peers/results.json.
# Extra arguments go to compare.py (e.g. --repeat 1 --large-peers 20x250). Not part of CI.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
"$here/setup.sh"
(cd "$root" && cargo build --release --quiet --bin quorate)
exec "$here/.venv/bin/python" "$here/compare.py" "$@"
