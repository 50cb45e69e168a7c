#!/usr/bin/env bash
# A local etcd cluster for quorate's networked store (docs/distributed.md), on 127.0.0.1 only.
#
#   scripts/etcd.sh install                    # apt-get install etcd-server etcd-client if missing
#   scripts/etcd.sh start [--members N]        # start N members (default 1), wait until healthy
#   scripts/etcd.sh status                     # each member's health; exit 0 when all are healthy
#   scripts/etcd.sh stop [--purge]             # stop the members this script started (by PID);
#                                              # --purge also deletes their data
#   scripts/etcd.sh url                        # the store URL: etcd://127.0.0.1:2379,.../quorate
#
# Member i (from 0) listens for clients on port BASE+10*i and for peers on BASE+10*i+1
# (BASE: $QUORATE_ETCD_PORT, default 2379, so 2379/2380, 2389/2390, 2399/2400).
# Data, logs and PIDs live in $QUORATE_ETCD_DIR (default ${TMPDIR:-/tmp}/quorate-etcd):
# mI.etcd/ (data), mI.log, mI.pid. Members start with --heartbeat-interval 10
# --election-timeout 100 (a loopback cluster elects a leader in about 0.1 s); on real networks
# use etcd's defaults (100/1000) or the round-trip time's guidance in etcd's tuning guide.
# The etcd binary is $QUORATE_ETCD (default: etcd on PATH; Debian's is /usr/bin/etcd).
set -euo pipefail

DIR="${QUORATE_ETCD_DIR:-${TMPDIR:-/tmp}/quorate-etcd}"
BASE="${QUORATE_ETCD_PORT:-2379}"
ETCD="${QUORATE_ETCD:-etcd}"
PREFIX="quorate"

say() { echo "etcd.sh: $*" >&2; }
usage() {
    sed -n '3,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

client_port() { echo $((BASE + 10 * $1)); }
peer_port() { echo $((BASE + 10 * $1 + 1)); }

# Members this script started and recorded (their PID files), in order.
members() {
    local i=0
    while [ -f "$DIR/m$i.pid" ]; do
        echo "$i"
        i=$((i + 1))
    done
}

healthy() {
    local port answer
    port=$(client_port "$1")
    answer=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" &&
        printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 &&
        timeout 2 cat <&3) 2>/dev/null || true)
    [[ "$answer" == *'"health":"true"'* ]]
}

running() {
    local pid
    pid=$(cat "$DIR/m$1.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null
}

url() {
    local hosts="" i
    for i in $(members); do
        hosts="${hosts:+$hosts,}127.0.0.1:$(client_port "$i")"
    done
    [ -n "$hosts" ] || { say "no members started (scripts/etcd.sh start)"; return 1; }
    echo "etcd://$hosts/$PREFIX"
}

install() {
    if command -v "$ETCD" >/dev/null 2>&1 && command -v etcdctl >/dev/null 2>&1; then
        say "already installed: $(command -v "$ETCD")"
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq etcd-server etcd-client >/dev/null
    say "installed: $(command -v "$ETCD")"
}

start() {
    local n=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --members) n="${2:?--members needs a number}"; shift 2 ;;
            *) say "unknown option $1"; usage ;;
        esac
    done
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { say "--members needs a positive number, not $n"; exit 2; }
    command -v "$ETCD" >/dev/null 2>&1 || {
        say "$ETCD not found; install it with: scripts/etcd.sh install"
        exit 1
    }
    if [ -n "$(members)" ]; then
        say "members are recorded in $DIR already; scripts/etcd.sh stop first"
        exit 1
    fi
    mkdir -p "$DIR"
    local initial="" i
    for ((i = 0; i < n; i++)); do
        initial="${initial:+$initial,}m$i=http://127.0.0.1:$(peer_port "$i")"
    done
    for ((i = 0; i < n; i++)); do
        local client="http://127.0.0.1:$(client_port "$i")" peer="http://127.0.0.1:$(peer_port "$i")"
        nohup "$ETCD" --name "m$i" --data-dir "$DIR/m$i.etcd" \
            --listen-client-urls "$client" --advertise-client-urls "$client" \
            --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
            --initial-cluster "$initial" --initial-cluster-state new \
            --initial-cluster-token quorate-local \
            --heartbeat-interval 10 --election-timeout 100 \
            --logger zap --log-level warn \
            </dev/null >>"$DIR/m$i.log" 2>&1 &
        echo $! >"$DIR/m$i.pid"
    done
    for ((i = 0; i < n; i++)); do
        local tries=0
        until healthy "$i"; do
            if ! running "$i"; then
                say "member m$i exited; its log ($DIR/m$i.log) ends with:"
                tail -n 5 "$DIR/m$i.log" >&2
                stop
                exit 1
            fi
            tries=$((tries + 1))
            if [ "$tries" -gt 200 ]; then
                say "member m$i not healthy after 20 s; see $DIR/m$i.log"
                stop
                exit 1
            fi
            sleep 0.1
        done
    done
    say "$n member(s) healthy; data in $DIR"
    url
}

status() {
    local all=0 any="" i
    for i in $(members); do
        any=1
        if running "$i" && healthy "$i"; then
            echo "m$i 127.0.0.1:$(client_port "$i") healthy (pid $(cat "$DIR/m$i.pid"))"
        elif running "$i"; then
            echo "m$i 127.0.0.1:$(client_port "$i") running, not healthy (pid $(cat "$DIR/m$i.pid"))"
            all=1
        else
            echo "m$i 127.0.0.1:$(client_port "$i") not running"
            all=1
        fi
    done
    if [ -z "$any" ]; then
        echo "no members started (scripts/etcd.sh start)"
        return 1
    fi
    return "$all"
}

stop() {
    local purge="" i pid
    while [ $# -gt 0 ]; do
        case "$1" in
            --purge) purge=1; shift ;;
            *) say "unknown option $1"; usage ;;
        esac
    done
    for i in $(members); do
        pid=$(cat "$DIR/m$i.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        fi
        rm -f "$DIR/m$i.pid"
        say "stopped m$i (pid $pid)"
    done
    if [ -n "$purge" ]; then
        rm -rf "$DIR"/m*.etcd "$DIR"/m*.log
        say "deleted the data in $DIR"
    fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    install) install ;;
    start) start "$@" ;;
    status) status ;;
    stop) stop "$@" ;;
    url) url ;;
    -h | --help | help) usage ;;
    *) usage ;;
esac
