# Sourced by the figure scripts: renders a root alone (no children) into $work with
# the relay in $bin, and sets $node (its directory) and $api (its API address).
# `root_alone_serve` then starts it on sled, sets $root (its pid) and the STRATA_*
# variables, and waits until it answers.
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
[ -n "$api" ] || { echo "no api address in $node/config.yaml"; cat "$node/config.yaml"; exit 1; }

root_alone_serve() {
    "$bin/relay" serve --config "$node/config.yaml" > "$work/root.log" 2>&1 &
    root=$!
    export STRATA_SERVER=$api STRATA_SERVER_NAME=center STRATA_CA=$work/ca.crt
    STRATA_TOKEN=$(head -1 "$work/api.tokens")
    export STRATA_TOKEN
    for _ in $(seq 1 100); do "$bin/relay" get configmap >/dev/null 2>&1 && break; sleep 0.2; done
}
