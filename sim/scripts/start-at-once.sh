#!/usr/bin/env bash
# Starts every node of deploy/examples/four-tiers.yaml at the same moment, each its own
# process (relay serve / agent run, as rendered by `relay topology render`), applies a
# Deployment placed on { role: pos, continent: emea }, and counts the runs in which both
# selected clusters run it within 30 s. Usage: start-at-once.sh [RUNS] [BIN_DIR]
# (BIN_DIR holds relay and agent; default target/debug). Prints "converged K/RUNS".
set -uo pipefail
runs=${1:-20}
bin=$(cd "${2:-target/debug}" && pwd)
topology=$(cd "$(dirname "$0")/../../deploy/examples" && pwd)/four-tiers.yaml
converged=0
for run in $(seq 1 "$runs"); do
    dir=$(mktemp -d)
    "$bin/relay" topology certs "$topology" -o "$dir" >/dev/null 2>&1
    "$bin/relay" topology render "$topology" -o "$dir" >/dev/null 2>&1
    pids=()
    # Rendered configurations: nodes/NAME/config.yaml (or NAME.yaml before the layout
    # by node directory).
    configs=$(ls "$dir"/nodes/*/config.yaml 2>/dev/null || ls "$dir"/*.yaml | grep -v ports.yaml)
    for cfg in $configs; do
        if grep -q '^cluster:' "$cfg"; then
            RUST_LOG=warn "$bin/agent" run --config "$cfg" >/dev/null 2>&1 &
        else
            RUST_LOG=warn "$bin/relay" serve --config "$cfg" >/dev/null 2>&1 &
        fi
        pids+=($!)
    done
    api=127.0.0.1:$(awk '/^center.api:/ { print $2 }' "$dir/ports.yaml")
    export STRATA_SERVER=$api STRATA_SERVER_NAME=center STRATA_CA=$dir/ca.crt STRATA_TOKEN=$(head -1 "$dir/api.tokens")
    cat > "$dir/app.yaml" <<'APP'
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec: { replicas: 1 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos-emea }
spec:
  objects: [ { selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos, continent: emea } } }
APP
    for _ in $(seq 1 30); do
        "$bin/relay" apply -f "$dir/app.yaml" >/dev/null 2>&1 && break
        sleep 1
    done
    ok=0
    for _ in $(seq 1 30); do
        if "$bin/relay" get deployment pos -o json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)[0]["placements"][0]["summary"]
sys.exit(0 if s["expected"] == 2 and s["health"]["available"] == 2 else 1)' 2>/dev/null; then
            ok=1; break
        fi
        sleep 1
    done
    converged=$((converged + ok))
    echo "run $run: $([ $ok = 1 ] && echo converged || echo 'NOT converged in 30 s')"
    kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
    rm -rf "$dir"
done
echo "converged $converged/$runs"
