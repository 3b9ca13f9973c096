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
# The sandbox runs the system's python3 (the worker's own Python may live where the
# unprivileged sandbox user cannot reach); pytest and venv make Python repos work there.
missing=0
for path in /usr/bin/bwrap /usr/bin/git /usr/bin/redis-server /usr/bin/python3 \
            /usr/lib/python3/dist-packages/pytest /usr/lib/python3.*/ensurepip; do
  [ -e "$path" ] || missing=1
done
if [ "$missing" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq bubblewrap git redis-server python3 python3-venv python3-pytest >/dev/null
fi
if [ -n "$extras" ] && { ! command -v systemd-analyze >/dev/null 2>&1 || \
                          ! [ -x /usr/bin/chromium ]; }; then
  # The tests verify deploy/'s systemd units with systemd-analyze and render the
  # dashboard in Debian's headless Chromium (driven by playwright, never downloaded).
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq systemd chromium >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e ".${extras}"
