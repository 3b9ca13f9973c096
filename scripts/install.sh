#!/usr/bin/env bash
# Installs frognano-bot and what it needs on Debian/Ubuntu: bubblewrap (the
# sandbox), git, redis-server (the queue), and the Python package itself, in a
# virtual environment (Debian's and Ubuntu's python3 refuse `pip install` outside
# one, PEP 668).
#   scripts/install.sh          the bot
#   scripts/install.sh --dev    plus the test and lint tools
# Where it goes:
#   the virtual environment  $VIRTUAL_ENV when one is active, else $FROGNANO_VENV,
#                            else /opt/frognano/venv (root) or
#                            ${XDG_DATA_HOME:-~/.local/share}/frognano/venv
#   the `frognano` command   linked into $FROGNANO_BIN_DIR (default /usr/local/bin,
#                            on every PATH already), so it works in this shell at once
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
                          ! [ -x /usr/bin/chromium ] || \
                          ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }; then
  # The tests verify deploy/'s systemd units with systemd-analyze, render the
  # dashboard in Debian's headless Chromium (driven by playwright, never downloaded),
  # and run the run store on a private PostgreSQL cluster (initdb + pg_ctl).
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq systemd chromium postgresql >/dev/null
fi

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv="$VIRTUAL_ENV"
elif [ -n "${FROGNANO_VENV:-}" ]; then
  venv="$FROGNANO_VENV"
elif [ "$(id -u)" -eq 0 ]; then
  venv=/opt/frognano/venv
else
  venv="${XDG_DATA_HOME:-$HOME/.local/share}/frognano/venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
fi
echo "installing frognano-bot into $venv (llama-cpp-python builds from source: 6-10 minutes)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras}"

if [ -z "${VIRTUAL_ENV:-}" ]; then
  bin_dir="${FROGNANO_BIN_DIR:-/usr/local/bin}"
  link_sudo=""
  [ -w "$bin_dir" ] || link_sudo="$sudo"
  $link_sudo mkdir -p "$bin_dir"
  $link_sudo ln -sfn "$venv/bin/frognano" "$bin_dir/frognano"
  hash -r 2>/dev/null || true
  echo "frognano is $bin_dir/frognano -> $venv/bin/frognano"
else
  echo "frognano is $venv/bin/frognano (your active virtual environment)"
fi
