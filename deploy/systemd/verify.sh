#!/usr/bin/env bash
# Checks the units with systemd-analyze verify (syntax, directives, the executable),
# pointing ExecStart at the binaries in BIN_DIR instead of /usr/local/bin. Skips, saying
# so, where systemd-analyze is missing.
#
#   deploy/systemd/verify.sh BIN_DIR
set -euo pipefail
bin=$(cd "${1:?usage: verify.sh BIN_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd-analyze not found: units not verified" >&2
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for unit in strata-relay.service strata-agent.service; do
    sed "s#/usr/local/bin/#$bin/#" "$here/$unit" >"$work/$unit"
done
# Any message is a finding: fail on output as well as on the exit code.
out=$(systemd-analyze verify "$work/strata-relay.service" "$work/strata-agent.service" 2>&1) || {
    echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "$out" >&2; exit 1; fi
echo "units verified: strata-relay.service strata-agent.service"
for unit in strata-relay.service strata-agent.service; do
    systemd-analyze security --offline=true "$work/$unit" 2>/dev/null | grep -i "overall exposure" || true
done
