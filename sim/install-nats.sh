#!/usr/bin/env bash
# Installs nats-server (Debian's package; bookworm has 2.9.10) for the benchmark's NATS
# baseline, where it is missing. The harness itself installs nothing.
set -euo pipefail
if command -v nats-server >/dev/null 2>&1; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
$sudo apt-get install -y -qq nats-server >/dev/null
nats-server --version
