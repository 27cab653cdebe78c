#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages; apt-get only when a package is absent),
# checks the CUDA toolkit, and builds kevolve into build/.
#
#   scripts/setup.sh                      install + build
#   scripts/setup.sh --test               install + build + run every test (ctest)
#   scripts/setup.sh --run ARGS...        install + build + run: build/cli/kevolve ARGS...
#
# Environment: BUILD_DIR (default build), BUILD_TYPE (default RelWithDebInfo), JOBS
# (default: nproc), CUDAToolkit_ROOT (default /usr/local/cuda or the nvcc on PATH).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
build_type=${BUILD_TYPE:-RelWithDebInfo}
jobs=${JOBS:-$(nproc)}

packages=(build-essential cmake ninja-build pkg-config libsqlite3-dev sqlite3 libcurl4-openssl-dev libssl-dev
          nlohmann-json3-dev libtbb-dev libspdlog-dev catch2 libcli11-dev libcpp-httplib-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit (NVRTC, CUPTI, headers). libcuda, the driver, is NOT needed to build.
cuda_root=${CUDAToolkit_ROOT:-}
if [ -z "$cuda_root" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ] || [ -f /usr/local/cuda/include/nvrtc.h ]; then cuda_root=/usr/local/cuda
  elif command -v nvcc >/dev/null; then cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  fi
fi
if [ -z "$cuda_root" ] || [ ! -f "$cuda_root/include/nvrtc.h" ]; then
  echo "setup: error: the CUDA toolkit was not found (looked in /usr/local/cuda and for nvcc on PATH)." >&2
  echo "setup: install the CUDA 13 toolkit, or set CUDAToolkit_ROOT to its folder." >&2
  exit 1
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" -DCUDAToolkit_ROOT="$cuda_root" >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"

mode=${1:-}
case "$mode" in
  --test)
    cd "$build_dir"
    ctest --output-on-failure -j "$jobs"
    # CTest reports the [gpu] tests as "Skipped" without saying why; say it here.
    rc=0; out=$("$build_dir/tests/kevolve_tests" "[gpu]" 2>&1) || rc=$?
    if [ "$rc" -eq 77 ]; then echo "$out" | head -1; fi
    ;;
  --run)
    shift
    exec "$build_dir/cli/kevolve" "$@"
    ;;
  "") echo "setup: built $build_dir/cli/kevolve" ;;
  *) echo "setup: unknown option '$mode' (use --test or --run ARGS...)" >&2; exit 2 ;;
esac
