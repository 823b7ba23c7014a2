#!/usr/bin/env bash
# Watch fan-out at the root (issue 49): a root alone on sled with no children, then
# relay/examples/watch_fanout N (N watchers of ConfigMaps, each its own TLS connection,
# one ConfigMap created; write -> each watcher's event, p50/p99/max) RUNS times, with the
# load average and the root's RSS. Usage: watch-fanout-figures.sh BIN_DIR [N] [RUNS]
# (BIN_DIR holds relay and watch_fanout, e.g. from cargo build --release -p strata-relay
# --bin relay --example watch_fanout, watch_fanout copied beside relay). Needs ulimit -n > 2N.
set -euo pipefail
bin=$(cd "$1" && pwd); n=${2:-1000}; runs=${3:-3}
work=$(mktemp -d); root=
cleanup() { [ -n "$root" ] && kill "$root" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cat > "$work/topology.yaml" <<YAML
apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: figures }
spec:
  root: { name: center, listen: 127.0.0.1:0, api: 127.0.0.1:0 }
YAML
"$bin/relay" topology certs --out "$work" "$work/topology.yaml" >/dev/null 2>&1
"$bin/relay" topology render --out "$work" "$work/topology.yaml" >/dev/null 2>&1
node="$work/nodes/center"
api=$(sed -n 's/^api: *{ *listen: *"\{0,1\}\([0-9.:]*\).*/\1/p' "$node/config.yaml")
"$bin/relay" serve --config "$node/config.yaml" > "$work/root.log" 2>&1 &
root=$!
export STRATA_SERVER=$api STRATA_SERVER_NAME=center STRATA_CA=$work/ca.crt STRATA_TOKEN=$(head -1 "$work/api.tokens")
for _ in $(seq 1 100); do "$bin/relay" get configmap >/dev/null 2>&1 && break; sleep 0.2; done
for r in $(seq 1 "$runs"); do
  echo "load $(cut -d' ' -f1-3 /proc/loadavg): $("$bin/watch_fanout" "$n" 2>&1 | tail -1)"
done
echo "root RSS $(grep VmRSS /proc/$root/status)"
