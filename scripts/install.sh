#!/usr/bin/env bash
# Installs frognano-bot and what it needs on Debian/Ubuntu: bubblewrap (the
# sandbox), git, redis-server (the queue), and the Python package itself, in a
# virtual environment (Debian's and Ubuntu's python3 refuse `pip install` outside
# one, PEP 668).
#   scripts/install.sh          the bot
#   scripts/install.sh --dev    plus the test and lint tools
#   scripts/install.sh --cuda-args   only print the CMake arguments it would build
#                                    llama.cpp with on this machine, and why
# Where it goes:
#   the virtual environment  $VIRTUAL_ENV when one is active, else $FROGNANO_VENV,
#                            else /opt/frognano/venv (root) or
#                            ${XDG_DATA_HOME:-~/.local/share}/frognano/venv
#   the `frognano` command   linked into $FROGNANO_BIN_DIR (default /usr/local/bin,
#                            on every PATH already), so it works in this shell at once
set -euo pipefail
cd "$(dirname "$0")/.."
# What this makes is read by the sandbox's unprivileged uids (below): a hardened umask
# (027, 077) would keep them out of it.
umask 022
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

# llama.cpp with CUDA when this machine has an NVIDIA GPU and the CUDA compiler, built
# for this machine's GPU architectures only (a build for all of them takes far longer).
# Prints the CMake arguments (nothing: a CPU build) and says on stderr what it found.
cuda_cmake_args() {
  local nvcc smi caps
  smi="$(command -v nvidia-smi || true)"
  if [ -z "$smi" ]; then
    echo "no NVIDIA GPU here (no nvidia-smi): llama.cpp is built for the CPU" >&2
    return 0
  fi
  nvcc="$(command -v nvcc || true)"
  if [ -z "$nvcc" ] && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  fi
  if [ -z "$nvcc" ]; then
    echo "an NVIDIA GPU is here, but not the CUDA compiler (nvcc): install the CUDA" \
         "toolkit (https://developer.nvidia.com/cuda-downloads, or apt-get install" \
         "nvidia-cuda-toolkit) and run this script again; building for the CPU now" >&2
    return 0
  fi
  caps="$("$smi" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null \
          | tr -d ' .' | grep -E '^[0-9]+$' | sort -u | paste -sd';' || true)"
  [ -n "$caps" ] || caps=native
  echo "NVIDIA GPU found (CUDA architectures $caps): llama.cpp is built with CUDA ($nvcc)" >&2
  echo "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$caps -DCMAKE_CUDA_COMPILER=$nvcc"
}
if [ "${1:-}" = "--cuda-args" ]; then
  cuda_cmake_args
  exit 0
fi

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
# The sandbox runs the system's python3 (the worker's own Python may live where the
# unprivileged sandbox user cannot reach); pytest and venv make Python repos work there.
# postgresql and redis-server are also the test services a repository's `services:`
# asks for (docs/SERVICES.md): started inside each sandbox from these binaries.
missing=0
for path in /usr/bin/bwrap /usr/bin/git /usr/bin/redis-server /usr/bin/python3 \
            /usr/lib/python3/dist-packages/pytest /usr/lib/python3.*/ensurepip \
            /usr/lib/postgresql/*/bin/initdb; do
  [ -e "$path" ] || missing=1
done
if [ "$missing" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq bubblewrap git redis-server postgresql python3 python3-venv \
    python3-pytest >/dev/null
fi
if [ -n "$extras" ] && { ! command -v systemd-analyze >/dev/null 2>&1 || \
                          ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/curl ] || \
                          ! [ -x /usr/bin/gcc ] || ! ls /usr/include/python3*/Python.h \
                            >/dev/null 2>&1 || \
                          ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }; then
  # The tests verify deploy/'s systemd units with systemd-analyze, render the
  # dashboard in Debian's headless Chromium (driven by playwright, never downloaded),
  # and run the run store on a private PostgreSQL cluster (initdb + pg_ctl); the
  # sandbox scenarios reach out with curl (a fresh Debian machine may lack it), and one
  # builds a C extension in the sandbox with the system's gcc and Python headers.
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq systemd chromium postgresql curl gcc python3-dev >/dev/null
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
# As root the sandbox runs repositories' commands as other uids, with this venv's python
# and packages (pytest, the database clients) on its PATH: they must be able to enter
# every folder on the way, the Python the venv was made from included (pyenv's lives
# under /root). closed_dir prints the first folder on the way to $1 they cannot enter.
closed_dir() {
  local dir="$1"
  [ -n "$dir" ] || return 0
  while [ "$dir" != / ]; do
    case "$(stat -L -c %A "$dir" 2>/dev/null)" in *[xt]) ;; *) printf '%s' "$dir"; return 0 ;; esac
    dir="$(dirname "$dir")"
  done
}
base_of() { "$1" -c 'import sys; print(sys.base_prefix)' 2>/dev/null || true; }
maker=python3
if [ "$(id -u)" -eq 0 ]; then
  closed="$(closed_dir "$(base_of python3)")"
  if [ -n "$closed" ] && [ -x /usr/bin/python3 ]; then
    echo "the sandbox's uids cannot enter $closed, where $(command -v python3) lives:" \
         "the venv is made with /usr/bin/python3"
    maker=/usr/bin/python3
  fi
  closed="$(closed_dir "$(base_of "$venv/bin/python")")"
  if [ -x "$venv/bin/python" ] && [ -n "$closed" ]; then
    echo "the venv $venv was made by a Python under $closed, which the sandbox's uids" \
         "cannot enter: making it again with $maker"
    "$maker" -m venv --clear "$venv"
  fi
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  "$maker" -m venv "$venv"
fi
cmake_args="$(cuda_cmake_args)"
if [ -n "$cmake_args" ] && ! "$venv/bin/python" -c "import llama_cpp, sys; \
    sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null; then
  # Built first, from source and never from pip's cache (which may hold a CPU wheel);
  # the project's own install below then keeps this build of the pinned version.
  reinstall=""
  "$venv/bin/python" -c "import llama_cpp" 2>/dev/null && reinstall="--force-reinstall --no-deps"
  echo "building llama-cpp-python with CUDA: $cmake_args"
  # shellcheck disable=SC2086
  CMAKE_ARGS="$cmake_args" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      --no-cache-dir --no-binary llama-cpp-python $reinstall "llama-cpp-python==0.3.36"
fi
echo "installing frognano-bot into $venv (llama-cpp-python builds from source: 6-10 minutes)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras}"

# The sandbox's uids read the venv whatever umask made it before; a parent they cannot
# enter hides it: say which, and how.
if [ "$(id -u)" -eq 0 ]; then
  chmod -R a+rX "$venv"
  if [ "$venv" = /opt/frognano/venv ]; then
    # The default place: its folders are this install's to open (/opt is 0755 by the FHS).
    chmod a+rx /opt/frognano
    case "$(stat -L -c %A /opt)" in *[xt]) ;; *) chmod o+x /opt
      echo "opened /opt to other users (o+x): the sandbox's uids read the venv there" ;; esac
  fi
  closed="$(closed_dir "$(dirname "$venv")")"
  if [ -n "$closed" ]; then
    echo "warning: the sandbox's uids cannot enter $closed, so they cannot use the" \
         "venv $venv (commands in the sandbox get the system python3 without its" \
         "packages): chmod o+x $closed, or install to a venv elsewhere" \
         "(FROGNANO_VENV=/opt/frognano/venv)" >&2
  fi
fi

if [ -z "${VIRTUAL_ENV:-}" ]; then
  bin_dir="${FROGNANO_BIN_DIR:-/usr/local/bin}"
  link_sudo=""
  [ -w "$bin_dir" ] || link_sudo="$sudo"
  $link_sudo mkdir -p "$bin_dir"
  $link_sudo ln -sfn "$venv/bin/frognano" "$bin_dir/frognano"
  hash -r 2>/dev/null || true
  installed="$bin_dir/frognano"
  echo "frognano is $installed -> $venv/bin/frognano"
  case ":$PATH:" in
    *":$bin_dir:"*) command_name=frognano ;;
    *)
      # A FROGNANO_BIN_DIR off PATH: `frognano` would not be found, or an older one would.
      echo "warning: $bin_dir is not on your PATH: add it (export PATH=\"$bin_dir:\$PATH\"" \
           "in ~/.profile), or run $installed by its full path" >&2
      command_name="$installed" ;;
  esac
else
  installed="$venv/bin/frognano"
  command_name="$installed"
  echo "frognano is $installed (your active virtual environment)"
fi
# For a script that goes on with the install (.ci/run): the command this install made,
# not whichever `frognano` comes first on PATH.
if [ -n "${FROGNANO_INSTALL_RECORD:-}" ]; then
  printf '%s\n' "$installed" > "$FROGNANO_INSTALL_RECORD"
fi
test_model=""
[ -n "$extras" ] && test_model="
  $command_name solve --model \"\$($command_name model path --test-model)\" \\
      --chat-template \"\$($command_name model path --test-model --chat-template)\" \\
      PATH/TO/REPO --issue \"...\"      a real small model drive the loop on a CPU"
cat <<NEXT

next:
  $command_name doctor                  what this host still needs, each with its fix
  $command_name model pull              the FrogNano GGUF (about 2.5 GB), then:
  export FROGNANO_MODEL="\$($command_name model path)"
  $command_name solve PATH/TO/REPO --issue "..."   one issue on a local checkout, no GitHub$test_model
  $command_name up                      the GitHub App: receiver, workers, setup page
NEXT
