#!/usr/bin/env bash
# Installs nats-server (Debian's package; bookworm has 2.9.10) for the benchmark's NATS
# baseline, where it is missing. The harness itself installs nothing.
set -euo pipefail
if command -v nats-server >/dev/null 2>&1; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing from Debian: nats-server" >&2
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
# The package starts a server where services start; the benchmark runs its own.
$sudo systemctl stop nats-server >/dev/null 2>&1 || $sudo service nats-server stop >/dev/null 2>&1 || true
nats-server --version
