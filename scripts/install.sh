#!/usr/bin/env bash
# Installs frognano-bot and what it needs on Debian/Ubuntu: bubblewrap (the
# sandbox), git, redis-server (the queue), and the Python package itself.
#   scripts/install.sh          the bot
#   scripts/install.sh --dev    plus the test and lint tools
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
missing=()
for tool in bwrap git redis-server; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq bubblewrap git redis-server >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e ".${extras}"
