#!/usr/bin/env bash
# Time from start to connected through an HTTP proxy where UDP is blocked (issue 16):
# `relay up` of three tiers (center <- site-1 <- shop-1), each node its own process,
# every link `transport: auto` through tinyproxy, inside a network namespace of its own
# (`unshare -rn`, no privilege needed where user namespaces are allowed) where nftables
# drops every UDP datagram. QUIC cannot complete a handshake, so each link falls back to
# TLS/TCP through the proxy after `auto`'s 3 s. Prints, per run and mode, the seconds
# from the start of `relay up` to its "every link is connected" line:
#   blocked  auto, UDP dropped (the figure)
#   open     auto, UDP passes (QUIC; the control)
#   tcp      transport: tcp through the proxy (no QUIC attempt)
# Usage: sim/scripts/proxied-start.sh [RUNS] [BIN_DIR]
# (BIN_DIR holds relay and agent; default target/release). Needs tinyproxy, nft, unshare.
set -euo pipefail
runs=${1:-3}
bin=$(cd "${2:-target/release}" && pwd)
if [ -z "${STRATA_IN_NETNS:-}" ]; then
    exec env STRATA_IN_NETNS=1 unshare -rn "$0" "$runs" "$bin"
fi
ip link set lo up
tinyproxy=$(command -v tinyproxy || echo /usr/bin/tinyproxy)
measure() { # MODE -> seconds, or "never" after 60 s
    local mode=$1 dir transport
    dir=$(mktemp -d)
    transport=auto
    [ "$mode" = tcp ] && transport=tcp
    nft flush ruleset
    if [ "$mode" = blocked ]; then
        nft add table inet strata
        nft add chain inet strata out '{ type filter hook output priority 0 ; }'
        nft add rule inet strata out meta l4proto udp drop
    fi
    printf 'Port 3128\nListen 127.0.0.1\nTimeout 600\nLogLevel Error\nMaxClients 50\n' >"$dir/tp.conf"
    "$tinyproxy" -d -c "$dir/tp.conf" >/dev/null 2>&1 &
    local tp=$!
    sleep 0.3
    cat >"$dir/topology.yaml" <<TOPO
apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: proxied }
spec:
  root: { name: center }
  relays:
    - { name: site-1, parent: center, transport: $transport, proxy: "http://127.0.0.1:3128" }
  clusters:
    - { name: shop-1, parent: site-1, transport: $transport, proxy: "http://127.0.0.1:3128", labels: { role: pos } }
TOPO
    local start end result=never line
    start=$(date +%s.%N)
    coproc UP { exec env RUST_LOG=warn "$bin/relay" up "$dir/topology.yaml" --data "$dir/data" 2>/dev/null; }
    local up=$UP_PID
    while IFS= read -r -t 60 line <&"${UP[0]}"; do
        if [[ $line == *"every link is connected"* ]]; then
            end=$(date +%s.%N)
            result=$(echo "$end - $start" | bc)
            break
        fi
    done
    kill -TERM "$up" 2>/dev/null || true
    wait "$up" 2>/dev/null || true
    kill "$tp" 2>/dev/null || true
    wait "$tp" 2>/dev/null || true
    rm -rf "$dir"
    echo "$result"
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in blocked open tcp; do
    times=()
    for _ in $(seq 1 "$runs"); do
        times+=("$(measure "$mode")")
    done
    echo "$mode: ${times[*]} s"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
