#!/usr/bin/env bash
# Watch fan-out at the root (issue 49): a root alone on sled with no children, then
# relay/examples/watch_fanout N (N watchers of ConfigMaps, each its own TLS connection,
# one ConfigMap created; write -> each watcher's event, p50/p99/max) RUNS times, with the
# load average and the root's RSS. Usage: watch-fanout-figures.sh BIN_DIR [N] [RUNS]
# (BIN_DIR holds relay and watch_fanout, e.g. from cargo build --release -p strata-relay
# --bin relay --example watch_fanout, watch_fanout copied beside relay). Needs ulimit -n > 2N.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$1" && pwd); n=${2:-1000}; runs=${3:-3}
work=$(mktemp -d); root=
cleanup() { [ -n "$root" ] && kill "$root" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# shellcheck source=root-alone.sh
. "$here/sim/scripts/root-alone.sh"
root_alone_serve
for r in $(seq 1 "$runs"); do
  echo "load $(cut -d' ' -f1-3 /proc/loadavg): $("$bin/watch_fanout" "$n" 2>&1 | tail -1)"
done
echo "root RSS $(grep VmRSS /proc/$root/status)"
