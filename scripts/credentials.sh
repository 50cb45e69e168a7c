#!/usr/bin/env bash
# Certificates and etcd users for running quorate across processes (docs/distributed.md,
# "Security: credentials and TLS"). Needs openssl; etcd-users needs etcdctl (Debian: etcd-client).
#
#   scripts/credentials.sh certs DIR [CLIENT...]     # DIR/ca.pem, server.pem (127.0.0.1,
#                                                   # localhost), client-NAME.pem for each CLIENT
#                                                   # (default: quorate-client); keys *-key.pem
#   scripts/credentials.sh etcd-users DIR ENDPOINT PREFIX SUPERVISOR [WORKER...]
#   scripts/credentials.sh etcd-users DIR ENDPOINT PREFIX --peers PEER...
#                                                   # as an unauthenticated TLS client of a cluster
#                                                   # without auth: user root, the supervisor's and
#                                                   # each worker's (or each peer's) role and user
#                                                   # (grants as in the docs' table; name workers
#                                                   # and peers by their agent ids), then auth
#                                                   # enable. Passwords are generated into
#                                                   # DIR/passwords (mode 600).
#   scripts/credentials.sh nats-users DIR SUPERVISOR_ID [WORKER_ID...]
#   scripts/credentials.sh nats-users DIR --peers PEER_ID...
#                                                   # DIR/nats-users.conf: a nats-server
#                                                   # authorization block, one user per agent id
#                                                   # (the user name is the id) with the
#                                                   # permissions of the docs' table (a star's
#                                                   # supervisor and workers, or peers);
#                                                   # passwords into DIR/nats-passwords (mode 600).
set -euo pipefail

say() { echo "credentials.sh: $*" >&2; }
usage() {
    sed -n '5,24p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

leaf() { # DIR NAME CN [SAN]
    local dir="$1" name="$2" cn="$3" san="${4:-}"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" \
        -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" 2>/dev/null
    {
        [ -n "$san" ] && echo "subjectAltName=$san"
        echo "extendedKeyUsage=serverAuth,clientAuth"
        echo "keyUsage=digitalSignature,keyEncipherment"
    } >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
        -CAcreateserial -days 365 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
    rm -f "$dir/$name.csr" "$dir/$name.ext"
    chmod 600 "$dir/$name-key.pem"
}

certs() {
    [ $# -ge 1 ] || usage
    local dir="$1"
    shift
    local clients=("$@")
    [ ${#clients[@]} -gt 0 ] || clients=(quorate-client)
    command -v openssl >/dev/null || { say "openssl is not installed"; exit 1; }
    mkdir -p "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=quorate-ca \
        -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
    chmod 600 "$dir/ca-key.pem"
    leaf "$dir" server "quorate server" "IP:127.0.0.1,DNS:localhost"
    for c in "${clients[@]}"; do
        leaf "$dir" "client-$c" "$c"
    done
    say "wrote $dir: ca.pem, server.pem, ${clients[*]/#/client-}"
}

etcd_users() {
    [ $# -ge 4 ] || usage
    local dir="$1" endpoint="$2" prefix="$3" sup="$4"
    shift 4
    local client
    client="$(ls "$dir"/client-*-key.pem 2>/dev/null | head -1)"
    [ -n "$client" ] || { say "no client certificate in $dir (run certs first)"; exit 1; }
    client="${client%-key.pem}"
    local e=(etcdctl --endpoints "$endpoint" --cacert "$dir/ca.pem" --cert "$client.pem" --key "$client-key.pem")
    local pw="$dir/passwords"
    (umask 077 && : >"$pw")
    new_user() { # USER ROLE
        local p
        p="$(openssl rand -hex 16)"
        echo "$1 $p" >>"$pw"
        "${e[@]}" user add "$1:$p" >/dev/null
        [ -z "$2" ] || "${e[@]}" user grant-role "$1" "$2" >/dev/null
    }
    grant() { "${e[@]}" role grant-permission "$1" "$2" --prefix=true "$3" >/dev/null; }
    new_user root ""
    "${e[@]}" user grant-role root root >/dev/null
    local role
    if [ "$sup" = --peers ]; then
        [ $# -ge 1 ] || usage
        # quorate_state::grants(.., EtcdRole::Peer): PEER_STORES shared, its own books.
        for p in "$@"; do
            role="quorate-peer-$p"
            "${e[@]}" role add "$role" >/dev/null
            grant "$role" read "/$prefix/kv/"
            for s in peer-roster peer-claims peer-states peer-budget peer-plans results world fence; do
                grant "$role" readwrite "/$prefix/kv/$s/"
            done
            grant "$role" readwrite "/$prefix/kv/book/$p/"
            new_user "$p" "$role"
        done
        "${e[@]}" auth enable >/dev/null
        say "auth enabled on $endpoint; passwords (root, $*) in $pw"
        return
    fi
    role=quorate-supervisor
    "${e[@]}" role add "$role" >/dev/null
    grant "$role" read "/$prefix/"
    for s in results budget runs intents fence; do grant "$role" readwrite "/$prefix/kv/$s/"; done
    grant "$role" readwrite "/$prefix/log/"
    new_user "$sup" "$role"
    for w in "$@"; do
        role="quorate-worker-$w"
        "${e[@]}" role add "$role" >/dev/null
        for s in results book fence; do grant "$role" read "/$prefix/kv/$s/"; done
        grant "$role" readwrite "/$prefix/kv/book/$w/"
        grant "$role" readwrite "/$prefix/kv/claims/$w/"
        # The scripted tools' world: it stands for the external systems the tools act on.
        grant "$role" readwrite "/$prefix/kv/world/"
        new_user "$w" "$role"
    done
    "${e[@]}" auth enable >/dev/null
    say "auth enabled on $endpoint; passwords (root, $sup, $*) in $pw"
}

# The subject permissions of quorate_nats::access::permissions (tests/processes_rogue.rs checks
# that this renders the same lists).
nats_user() { # KIND AGENT SUPERVISOR PASSWORD
    local kind="$1" a="$2" p="$3" pw="$4" pub sub
    local own="\"\$JS.API.CONSUMER.INFO.*.to-$a\", \"\$JS.API.CONSUMER.MSG.NEXT.*.to-$a\", \"\$JS.ACK.*.to-$a.>\""
    if [ "$kind" = supervisor ]; then
        pub="\"quorate.*.*.$a\", \"\$JS.API.>\", \"quorate.welcome.>\", \"quorate.end.>\", $own"
        sub="\"_INBOX_$a.>\", \"quorate.register.>\""
    elif [ "$kind" = peer ]; then
        # PEER_OPENS_A_RUN: any peer may be the first to join a run and open it.
        local opens="\"\$JS.API.STREAM.INFO.*\", \"\$JS.API.STREAM.CREATE.*\", \"\$JS.API.CONSUMER.INFO.*.*\", \"\$JS.API.CONSUMER.CREATE.*.*.quorate.*.*.*\""
        pub="\"quorate.*.*.$a\", $opens, $own"
        sub="\"_INBOX_$a.>\""
    else
        pub="\"quorate.*.$p.$a\", \"quorate.register.*.$a\", $own"
        sub="\"_INBOX_$a.>\", \"quorate.welcome.*.$a\", \"quorate.end.*\""
    fi
    echo "    { user: \"$a\", password: \"$pw\", permissions: { publish: { allow: [$pub] }, subscribe: { allow: [$sub] } } }"
}

nats_users() {
    [ $# -ge 2 ] || usage
    local dir="$1" sup="$2"
    shift 2
    local peers=""
    if [ "$sup" = --peers ]; then
        [ $# -ge 1 ] || usage
        peers=1
        sup="$1"
        shift
    fi
    local uuid='^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
    for id in "$sup" "$@"; do
        [[ "$id" =~ $uuid ]] || { say "$id is not a lowercase uuid (an agent id)"; exit 2; }
    done
    mkdir -p "$dir"
    local pw="$dir/nats-passwords" conf="$dir/nats-users.conf"
    (umask 077 && : >"$pw" && : >"$conf")
    password() { if [ -n "${QUORATE_CREDENTIALS_PASSWORD:-}" ]; then echo "$QUORATE_CREDENTIALS_PASSWORD"; else openssl rand -hex 16; fi; }
    {
        echo "authorization {"
        echo "  users = ["
        local p
        p="$(password)"
        echo "$sup $p" >>"$pw"
        if [ -n "$peers" ]; then
            nats_user peer "$sup" "" "$p"
        else
            nats_user supervisor "$sup" "$sup" "$p"
        fi
        for w in "$@"; do
            p="$(password)"
            echo "$w $p" >>"$pw"
            if [ -n "$peers" ]; then
                nats_user peer "$w" "" "$p"
            else
                nats_user worker "$w" "$sup" "$p"
            fi
        done
        echo "  ]"
        echo "}"
    } >"$conf"
    say "wrote $conf (include it in the server's config) and $pw"
}

[ $# -ge 1 ] || usage
cmd="$1"
shift
case "$cmd" in
certs) certs "$@" ;;
etcd-users) etcd_users "$@" ;;
nats-users) nats_users "$@" ;;
*) usage ;;
esac
