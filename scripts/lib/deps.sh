# SPDX-License-Identifier: BSL-1.0
# shellcheck shell=bash
# Shared by scripts/test, scripts/demo and scripts/bench-server (sourced, not run).
#
#   chime_phase "title"           prints a header line with the seconds since the script started
#   chime_require_deps pkg...     makes sure the Debian packages are installed:
#       all present        -> returns
#       missing, root      -> apt-get update + install (noninteractive, no recommends)
#       missing, not root  -> prints the apt-get command to run and exits 1
#   On a system without dpkg it checks only that the tools are on PATH.

# What chime needs to build and test, and why.
# shellcheck disable=SC2034  # used by the scripts that source this file
CHIME_BUILD_PACKAGES=(
  g++                     # the compiler (C++20)
  cmake                   # >= 3.25, for CMakePresets.json version 6
  ninja-build             # the presets' generator
  libgtest-dev            # tests/: GoogleTest
  libbenchmark-dev        # bench/: Google Benchmark (the release preset builds it)
  libconcurrentqueue-dev  # runtime: moodycamel::ConcurrentQueue command queues
  libboost-dev            # runtime and bench/: Boost.Lockfree
  libuv1-dev              # bench/lane_bench.cpp: the libuv peer (optional: left out if pkg-config finds no libuv)
  pkg-config              # bench/CMakeLists.txt finds libuv with it (a bare Debian root has none)
)
# shellcheck disable=SC2034
CHIME_TEST_PACKAGES=(
  "${CHIME_BUILD_PACKAGES[@]}"
  clang                   # header self-containment check with a second compiler
  clang-format            # scripts/lint: formatting of changed lines
  clang-tidy              # scripts/lint: .clang-tidy on changed files
  python3                 # tests/check_openmetrics.py (ctest metrics_parse_with_prometheus_client)
  python3-prometheus-client  # the same test: the real OpenMetrics parser reads write_openmetrics' text
  spin                    # model/check.sh: the SPIN model check of the slot protocol (ctest -L model)
)
# shellcheck disable=SC2034
CHIME_BENCH_SERVER_PACKAGES=(
  "${CHIME_BUILD_PACKAGES[@]}"
  wrk                     # scripts/bench-server only: the HTTP load generator (not needed by scripts/test)
  python3                 # scripts/bench-server: the slow-client script and the tables
)

CHIME_SCRIPT_START=${CHIME_SCRIPT_START:-$SECONDS}

chime_phase() {
  printf '\n==> [%4ss] %s\n' "$((SECONDS - CHIME_SCRIPT_START))" "$*"
}

chime_require_deps() {
  local -a wanted=("$@") missing=()
  local pkg

  if ! command -v dpkg-query >/dev/null 2>&1; then
    local tool
    for tool in c++ cmake ninja; do
      if ! command -v "$tool" >/dev/null 2>&1; then
        missing+=("$tool")
      fi
    done
    if ((${#missing[@]})); then
      echo "error: not a Debian system, and these tools are missing: ${missing[*]}" >&2
      echo "Install the equivalents of: ${wanted[*]}" >&2
      exit 1
    fi
    echo "note: no dpkg; assuming the equivalents of these are installed: ${wanted[*]}" >&2
    return 0
  fi

  for pkg in "${wanted[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null)" != ii* ]]; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "dependencies: all ${#wanted[@]} packages installed"
    return 0
  fi

  if ((EUID != 0)); then
    echo "error: missing packages: ${missing[*]}" >&2
    echo "Run this, then run $0 again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi

  echo "dependencies: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
}
