# Sourced by the figure scripts: starts `relay up` of deploy/examples/demo.yaml from
# BIN_DIR ($1, default target/debug) in a temporary directory removed on exit, waits
# until every link is connected, and sets $here, $bin, $work, $k (kubectl 1.33) and
# the STRATA_* variables and KUBECONFIG for the relay CLI and kubectl.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$(cd "${1:-$here/target/debug}" && pwd)
clients=$("$here/.ci/install-kube-clients" 2>/dev/null | tail -1)
work=$(mktemp -d)
trap 'kill $up 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$bin/relay" up "$here/deploy/examples/demo.yaml" --data "$work/data" > "$work/up.log" 2>&1 &
up=$!
for _ in $(seq 1 120); do grep -q "every link is connected" "$work/up.log" && break; sleep 1; done
eval "$(grep 'export STRATA' "$work/up.log")"
"$bin/relay" kubeconfig > "$work/kc.yaml"
export KUBECONFIG=$work/kc.yaml
k="$clients/kubectl"
