#!/usr/bin/env bash
# Figure: time for `relay drain CLUSTER --wait` to complete when the cluster holds 50
# objects (50 Deployments of one placement choosing 1 cluster), on a `relay up` of
# deploy/examples/demo.yaml. The drain is make-before-break: it completes once another
# cluster runs all 50 and the drained one holds none. Prints the load average too.
# Usage: drain-figure.sh [BIN_DIR] (default target/debug; use a release build for
# figures). Needs .ci/install-kube-clients.
source "$(dirname "$0")/relay-up.sh"
{
    printf 'apiVersion: strata.dev/v1alpha1\nkind: Placement\nmetadata: { name: drain-figure }\n'
    printf 'spec:\n  objects: [ { kinds: [Deployment], selector: { matchLabels: { app: drain-figure } } } ]\n'
    printf '  clusters: { selector: { matchLabels: { tier: store } }, count: 1 }\n---\n'
    for i in $(seq 1 50); do
        printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: d-%d, namespace: default, labels: { app: drain-figure } }\n' "$i"
        printf 'spec: { replicas: 1, selector: { matchLabels: { d: "%d" } }, template: { metadata: { labels: { d: "%d" } }, spec: { containers: [ { name: c, image: nginx } ] } } }\n---\n' "$i" "$i"
    done
} > "$work/app.yaml"
"$k" apply -f "$work/app.yaml" > /dev/null
cluster=""
for _ in $(seq 1 100); do
    cluster=$("$k" get placement drain-figure -o 'jsonpath={.status.decisions.clusters[0]}' 2>/dev/null || true)
    available=$("$k" get deployment d-50 -o 'jsonpath={.status.availableReplicas}' 2>/dev/null || true)
    [ -n "$cluster" ] && [ "$available" = 1 ] && break
    sleep 0.2
done
[ -n "$cluster" ] || { echo "the placement chose no cluster"; exit 1; }
sleep 3
echo "load average before the drain: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "50 Deployments run on $cluster; draining it"
"$bin/relay" drain "$cluster" --wait 5m
echo "now on: $("$k" get placement drain-figure -o 'jsonpath={.status.decisions.clusters[0]}')"
