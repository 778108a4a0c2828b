#!/usr/bin/env bash
# One entry point for set-up, build, demo and tests on a fresh Debian 12 box.
#   tools/dev.sh demo   install what is missing, build the binary, generate text with the embedded model
#   tools/dev.sh test   install what is missing, build, run every test (ctest + fuzz smoke)
#   tools/dev.sh build  install what is missing and build only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev libcli11-dev libpcre2-dev
          libssl-dev libxcb1-dev libxcb-ewmh-dev libxcb-icccm4-dev libxcb-xinput-dev
          libxcb-screensaver0-dev libatspi2.0-dev libvulkan-dev glslc spirv-tools)
# Only `test` needs these: the Computer History tests run an X server, a window manager and
# xdotool, and a GTK form (Python) on a D-Bus session with the accessibility bus for --atspi
# (tests/history_x11_test.cc).
# The playground's browser tests (tests/web) drive Debian's chromium headless. The GPU tests
# (tests/gpu_*_test.cc) run on Mesa's CPU Vulkan driver, lavapipe, under the Khronos validation
# layer (synchronization validation: a missing barrier, which lavapipe never shows).
TEST_PACKAGES=(xvfb openbox xdotool dbus-daemon at-spi2-core python3-gi gir1.2-gtk-3.0 chromium
               mesa-vulkan-drivers vulkan-validationlayers)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# build TARGET [PACKAGE...]: TARGET "all" builds everything (tests, benchmarks).
build() {
  local target=$1
  shift
  install_missing "$@"
  # A compiler cache where the developer has one (CI does not): rebuilds after a branch switch.
  local launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
  cmake --build build -j"$(nproc)" --target "$target"
}

run_fuzzers() {
  # Short libFuzzer runs of each parser where clang is present (coverage-guided, ASan+UBSan).
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "== clang++ not found: skipping fuzz smoke runs"
    return 0
  fi
  ls fuzz/*_fuzz.cc >/dev/null 2>&1 || return 0
  # A fuzzer that does not build is reported loudly but does not fail the run (clang is an
  # optional tool here); a fuzzer that finds a crash does fail it.
  if ! { CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
           -DUF_BUILD_FUZZERS=ON -DUF_BUILD_TESTS=OFF >/dev/null &&
         cmake --build build-fuzz -j"$(nproc)" --target $(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//'); }; then
    echo "== WARNING: fuzz targets failed to build with clang; fuzz smoke runs skipped"
    return 0
  fi
  for f in fuzz/*_fuzz.cc; do
    local name
    name=$(basename "$f" .cc)
    local corpus="fuzz/corpus/${name%_fuzz}"
    mkdir -p "build-fuzz/corpus-$name"
    echo "== fuzzing $name for ${UF_FUZZ_SECONDS:-30}s"
    "build-fuzz/$name" -max_total_time="${UF_FUZZ_SECONDS:-30}" -rss_limit_mb=2048 \
      -print_final_stats=0 "build-fuzz/corpus-$name" $( [ -d "$corpus" ] && echo "$corpus" ) \
      2>&1 | tail -n 3
  done
}

case "${1:-}" in
  demo)
    # Only the binary the demo runs; the test suite is `test`'s to build.
    t0=$SECONDS
    build ultrafast
    t1=$SECONDS
    ./build/ultrafast run -n 200
    echo "== demo: built in $((t1 - t0)) s, generated in $((SECONDS - t1)) s" >&2
    ;;
  test)
    build all "${TEST_PACKAGES[@]}"
    # The e2e tests (tests/e2e) use the openai and @anthropic-ai/sdk npm packages, the playground
    # tests (tests/web) puppeteer-core, each pinned in its package-lock.json (no browser
    # download: Debian's).
    if command -v npm >/dev/null 2>&1; then
      for dir in tests/e2e tests/web; do
        [ -f "$dir/package-lock.json" ] || continue
        echo "== npm ci ($dir)"
        PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix "$dir" --no-audit --no-fund >/dev/null ||
          echo "== npm ci failed: the tests in $dir will be skipped"
      done
    fi
    ctest --test-dir build -j"$(nproc)" --output-on-failure
    run_fuzzers
    ;;
  build)
    build all
    ;;
  *)
    echo "usage: $0 demo|test|build" >&2
    exit 2
    ;;
esac
