#!/usr/bin/env bash
# Figures of the root's Kubernetes API with the real kubectl, on a `relay up` of
# deploy/examples/demo.yaml: `kubectl apply -f` of 1,000 ConfigMaps in one file (wall
# time; again with --validate=false, which leaves out kubectl's own schema checks of
# each document), `kubectl get` of 10,000 objects in pages of 500 (wall time), the root's RSS
# holding them, and 100 concurrent watchers receiving one change (latency from the write
# to each watcher's event, relay/examples/watch_fanout.rs); then, with
# relay/examples/api_figures, the same list by a plain client (one request, pages of
# 500; JSON and Table) and 5,000 creates over 10 keep-alive connections. Usage:
# kube-figures.sh [BIN_DIR] (default target/debug; use the production build for figures:
# cargo build --profile production -p strata-relay -p strata-agent --bin relay --bin
# agent --example watch_fanout --example api_figures). Needs .ci/install-kube-clients.
# sim/scripts/api-figures.sh measures the root's API alone.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
source "$(dirname "$0")/relay-up.sh"
gen() { # N PREFIX
    for i in $(seq 1 "$1"); do
        printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: %s-%d, namespace: default, labels: { app: figures } }\ndata: { value: "%d" }\n---\n' "$2" "$i" "$i"
    done
}
gen 1000 one > "$work/1000.yaml"
gen 1000 unchecked > "$work/unchecked.yaml"
for part in $(seq 1 8); do gen 1000 "more-$part" > "$work/more-$part.yaml"; done
sleep 10
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/examples/watch_fanout" 100
start=$(date +%s.%N)
"$k" apply -f "$work/1000.yaml" > /dev/null
echo "kubectl apply -f of 1,000 ConfigMaps: $(echo "$(date +%s.%N) - $start" | bc) s"
start=$(date +%s.%N)
"$k" apply -f "$work/unchecked.yaml" --validate=false > /dev/null
echo "kubectl apply -f --validate=false of 1,000 ConfigMaps: $(echo "$(date +%s.%N) - $start" | bc) s"
# The rest through the relay CLI (one revision per 1,000 documents, its per-request limit).
for part in $(seq 1 8); do "$bin/relay" apply -f "$work/more-$part.yaml" > /dev/null; done
sleep 5
for run in 1 2 3; do
    start=$(date +%s.%N)
    n=$("$k" get cm -A --chunk-size=500 -o name | wc -l)
    echo "kubectl get cm -A (pages of 500), $n objects, run $run: $(echo "$(date +%s.%N) - $start" | bc) s"
done
start=$(date +%s.%N)
"$k" get cm -A --chunk-size=0 -o name > /dev/null
echo "kubectl get cm -A --chunk-size=0 -o name (one request): $(echo "$(date +%s.%N) - $start" | bc) s"
"$bin/examples/api_figures" list 500
"$bin/examples/api_figures" create 5000 10 ten
root=$(pgrep -f "relay serve --config $work/data/nodes/center/config.yaml" | sed -n 1p)
echo "root RSS with $n objects: $(awk '/VmRSS/ { print $2 / 1024 " MiB" }' /proc/"$root"/status)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
