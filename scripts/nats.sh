#!/usr/bin/env bash
# A local nats-server with JetStream for quorate's NATS transport, on 127.0.0.1 only.
#
#   scripts/nats.sh install        # apt-get install nats-server (Debian 12: 2.9.10), if missing
#   scripts/nats.sh start [PORT]   # start (default port 4222), wait until it accepts clients,
#                                  # print its URL (nats://127.0.0.1:PORT) on stdout
#   scripts/nats.sh stop           # stop the server this script started (by PID)
#   scripts/nats.sh status         # running or not, and its URL; exit 0 when running
#   scripts/nats.sh url            # the URL of the running server
#
# JetStream keeps its streams under $QUORATE_NATS_RUN/store; the PID, port and log files go to
# $QUORATE_NATS_RUN too (default: a folder under ${TMPDIR:-/tmp}). `stop` deletes nothing: a
# later `start` finds the same streams (quorate deletes its own streams when an exchange ends).
set -euo pipefail

RUN_DIR="${QUORATE_NATS_RUN:-${TMPDIR:-/tmp}/quorate-nats}"
PID_FILE="$RUN_DIR/server.pid"
PORT_FILE="$RUN_DIR/server.port"
LOG_FILE="$RUN_DIR/server.log"

say() { echo "nats: $*" >&2; }

binary() {
    if command -v nats-server >/dev/null 2>&1; then
        command -v nats-server
    elif [ -x /usr/sbin/nats-server ]; then
        echo /usr/sbin/nats-server
    else
        return 1
    fi
}

install() {
    if binary >/dev/null; then
        say "already installed: $(binary) ($("$(binary)" --version))"
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq nats-server >/dev/null
    say "installed $(binary) ($("$(binary)" --version))"
}

running() {
    [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

accepts() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

url() {
    echo "nats://127.0.0.1:$(cat "$PORT_FILE")"
}

start() {
    local port="${1:-4222}"
    if running; then
        say "already running (PID $(cat "$PID_FILE"))"
        url
        return 0
    fi
    local bin
    if ! bin="$(binary)"; then
        say "nats-server is not installed, install with scripts/nats.sh install"
        return 1
    fi
    if accepts "$port"; then
        say "port $port is taken; give another: scripts/nats.sh start PORT"
        return 1
    fi
    mkdir -p "$RUN_DIR/store"
    "$bin" -a 127.0.0.1 -p "$port" -js -sd "$RUN_DIR/store" >"$LOG_FILE" 2>&1 &
    echo $! >"$PID_FILE"
    echo "$port" >"$PORT_FILE"
    for _ in $(seq 1 100); do
        if accepts "$port"; then
            say "started (PID $(cat "$PID_FILE"), log $LOG_FILE)"
            url
            return 0
        fi
        if ! running; then break; fi
        sleep 0.1
    done
    say "did not accept clients on port $port; log: $LOG_FILE"
    tail -5 "$LOG_FILE" >&2 || true
    return 1
}

stop() {
    if ! running; then
        say "not running"
        rm -f "$PID_FILE"
        return 0
    fi
    local pid
    pid="$(cat "$PID_FILE")"
    kill "$pid"
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    rm -f "$PID_FILE"
    say "stopped (PID $pid)"
}

status() {
    if running && accepts "$(cat "$PORT_FILE")"; then
        say "running (PID $(cat "$PID_FILE"))"
        url
    else
        say "not running"
        return 1
    fi
}

case "${1:-}" in
install) install ;;
start) start "${2:-}" ;;
stop) stop ;;
status) status ;;
url) running && url ;;
*)
    sed -n '2,13p' "$0" >&2
    exit 2
    ;;
esac
