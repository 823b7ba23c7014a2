#!/usr/bin/env bash
# Apply throughput at the root, sled against etcd (three etcd members on loopback,
# Debian's etcd-server): ConfigMaps created with the real kubectl, one client applying
# N objects, then ten clients applying N/10 each at once, then the plain client
# relay/examples/api_figures creating 10 x N over 10 keep-alive connections (issue 49's
# goals: >= 1,000/s on sled, >= 500/s on a 3-member etcd); prints objects/s and the load
# average. Usage: root-apply-figures.sh [BIN_DIR] [N] (default target/debug, 300; use the
# production build for figures: cargo build --profile production -p strata-relay --bin
# relay --example api_figures). Needs .ci/install-kube-clients and .ci/install-etcd.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$here/target/debug}" && pwd)
n=${2:-300}
clients=$("$here/.ci/install-kube-clients" 2>/dev/null | tail -1)
k="$clients/kubectl"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# shellcheck source=root-alone.sh
. "$here/sim/scripts/root-alone.sh"

endpoints=()
initial=()
declare -a cport pport
for i in 0 1 2; do cport[$i]=$(port); pport[$i]=$(port); initial+=("m$i=http://127.0.0.1:${pport[$i]}"); done
for i in 0 1 2; do
    /usr/bin/etcd --name "m$i" --data-dir "$work/etcd-m$i" \
        --listen-client-urls "http://127.0.0.1:${cport[$i]}" --advertise-client-urls "http://127.0.0.1:${cport[$i]}" \
        --listen-peer-urls "http://127.0.0.1:${pport[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pport[$i]}" \
        --initial-cluster "$(IFS=,; echo "${initial[*]}")" --initial-cluster-state new \
        --max-txn-ops 10000 --max-request-bytes 16777216 > "$work/etcd-m$i.log" 2>&1 &
    pids+=($!)
    endpoints+=("http://127.0.0.1:${cport[$i]}")
done
for _ in $(seq 1 100); do curl -sf "${endpoints[0]}/health" | grep -q true && break; sleep 0.2; done

gen() { # FIRST COUNT PREFIX
    for i in $(seq "$1" $(($1 + $2 - 1))); do
        printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: %s-%d, namespace: default }\ndata: { value: "%d" }\n---\n' "$3" "$i" "$i"
    done
}
rate() { echo "scale=1; $1 / ($2 - $3)" | bc; }

for backend in sled etcd; do
    config="$node/config-$backend.yaml"
    cp "$node/config.yaml" "$config"
    if [ "$backend" = etcd ]; then
        echo "store: { etcd: { endpoints: [$(IFS=,; echo "${endpoints[*]}")], prefix: /strata/figures } }" >> "$config"
    fi
    rm -rf "$node/data"
    "$bin/relay" serve --config "$config" > "$work/root-$backend.log" 2>&1 &
    root=$!
    pids+=($root)
    export STRATA_SERVER=$api STRATA_SERVER_NAME=center STRATA_CA=$work/ca.crt STRATA_TOKEN=$(head -1 "$work/api.tokens")
    for _ in $(seq 1 100); do "$bin/relay" get configmap >/dev/null 2>&1 && break; sleep 0.2; done
    "$bin/relay" kubeconfig > "$work/kc-$backend.yaml"
    export KUBECONFIG=$work/kc-$backend.yaml
    gen 1 "$n" one > "$work/one-$backend.yaml"
    for c in $(seq 0 9); do gen $((c * n / 10 + 1)) $((n / 10)) "ten" > "$work/ten-$backend-$c.yaml"; done
    echo "$backend: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    start=$(date +%s.%N)
    "$k" apply -f "$work/one-$backend.yaml" > /dev/null
    end=$(date +%s.%N)
    echo "$backend: one kubectl, $n ConfigMaps: $(rate "$n" "$end" "$start") objects/s"
    start=$(date +%s.%N)
    for c in $(seq 0 9); do "$k" apply -f "$work/ten-$backend-$c.yaml" > /dev/null & done
    for j in $(jobs -p); do case " ${pids[*]} " in *" $j "*) ;; *) wait "$j";; esac; done
    end=$(date +%s.%N)
    echo "$backend: ten kubectl at once, $n ConfigMaps in all: $(rate "$n" "$end" "$start") objects/s (load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
    if [ -x "$bin/examples/api_figures" ]; then
        echo "$backend: plain client, $((10 * n)) ConfigMaps over 10 connections:"
        "$bin/examples/api_figures" create $((10 * n)) 10 "plain" | sed "s/^/$backend:   /"
    fi
    kill "$root"; wait "$root" 2>/dev/null || true
done
