#!/usr/bin/env bash
# The GPU benchmark in one command (issue 12; docs/BENCHMARKS.md, "GPU benchmark").
#
#   bash scripts/gpu_bench.sh pack [SDIST]   here, once: build/gpu-carry/ (~5 MB) with a
#                                            re-packed llama-cpp-python sdist and the wheels
#                                            the device machine lacks (diskcache, gguf)
#   bash scripts/gpu_bench.sh build          on the GPU machine: only the build (~270 s on 16
#                                            cores; a call of its own leaves the bench a whole
#                                            call's 600 s)
#   bash scripts/gpu_bench.sh                on the GPU machine: build llama-cpp-python with
#                                            CUDA (arch 90 unless CUDA_ARCH says otherwise)
#                                            into build/gpu-site, then `python3 -m bench gpu`
#                                            with results into $OUT, as they are measured,
#                                            within RUN_BUDGET_S (540 s) in all
#
# The device machine has no network: everything it needs travels in build/gpu-carry.
# A build already in build/gpu-site (a warm machine, a second call) is reused, so a call
# that ran out of time can simply be repeated.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
CARRY=build/gpu-carry
SITE=build/gpu-site

pack() {
  local sdist=${1:-} work
  work=$(mktemp -d)
  if [ -z "$sdist" ]; then
    python3 -m pip download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$VERSION"
    sdist=$(ls "$work"/llama_cpp_python-*.tar.gz)
  fi
  tar -xzf "$sdist" -C "$work"
  local src="$work/llama_cpp_python-$VERSION" vendor
  vendor="$src/vendor/llama.cpp"
  # What the CUDA build does not read: 76 MB down to about 5 MB.
  rm -rf "$src/.git" "$src/examples"
  for dir in models docs benches tests examples scripts conversion tools/ui tools/server media \
             gguf-py; do
    rm -rf "${vendor:?}/$dir"
  done
  for backend in "$vendor"/ggml/src/ggml-*/; do
    case "$(basename "$backend")" in
      ggml-cpu|ggml-cuda) ;;
      *) rm -rf "$backend" ;;
    esac
  done
  mkdir -p "$CARRY"
  tar -czf "$CARRY/llama_cpp_python-$VERSION.tar.gz" -C "$work" "llama_cpp_python-$VERSION"
  python3 -m pip download --no-deps -d "$CARRY" "diskcache==5.6.3" "gguf==0.19.0"
  rm -rf "$work"
  du -sh "$CARRY"
}

build() {
  if PYTHONPATH=$SITE python3 -c \
      "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" \
      2>/dev/null; then
    echo "gpu_bench: reusing the CUDA build in $SITE"
    return
  fi
  local work started
  work=$(mktemp -d)
  tar -xzf "$CARRY/llama_cpp_python-$VERSION.tar.gz" -C "$work"
  started=$(date +%s)
  echo "gpu_bench: building llama-cpp-python $VERSION with CUDA for arch ${CUDA_ARCH:-90}"
  rm -rf "$SITE"
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PATH="/usr/local/cuda/bin:$PATH" \
    python3 -m pip install --no-index --no-deps --no-build-isolation --target "$SITE" \
      "$work/llama_cpp_python-$VERSION"
  python3 -m pip install --no-index --no-deps --target "$SITE" "$CARRY"/*.whl
  echo "gpu_bench: built in $(( $(date +%s) - started )) s"
  rm -rf "$work"
}

case "${1:-run}" in
  pack) shift; pack "$@" ;;
  build) build ;;
  run)
    OUT=${OUT:-build/bench-gpu}
    mkdir -p "$OUT"
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
    case " ${*:2} " in
      *" --cpu-scale "*) echo "gpu_bench: --cpu-scale: the installed llama-cpp-python, no build" ;;
      *) build 2>&1 | tail -n 40 | tee "$OUT/build.log" ;;
    esac
    # One 600 s device call: the bench gets what is left of RUN_BUDGET_S (540 s) after the
    # build (seconds when reused, ~270 on a fresh machine) and skips the steps that won't fit.
    left=$(( ${RUN_BUDGET_S:-540} - SECONDS - 15 ))
    echo "gpu_bench: ${left} s left for the bench"
    PYTHONPATH="$PWD/$SITE:$PWD" OUT="$OUT" python3 -m bench gpu --out "$OUT" \
      --budget-s "$left" "${@:2}"
    cp docs/BENCHMARKS.md "$OUT/BENCHMARKS.md"
    echo "gpu_bench: results in $OUT/results.jsonl (render here: python3 -m bench gpu --render-from FILE)"
    ;;
  *) echo "usage: bash scripts/gpu_bench.sh [run [bench gpu options] | build | pack [SDIST]]" >&2; exit 2 ;;
esac
