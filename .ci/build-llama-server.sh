#!/usr/bin/env bash
# Build llama.cpp's own HTTP server (llama-server) from the source distribution of llama-cpp-python
# on PyPI, which vendors a pinned llama.cpp tree. No hub access: the web UI is left out (no npm, no
# prebuilt-asset download) and so are curl and OpenSSL. A lean CPU build (no -march=native, so the
# binary runs on any x86-64 CI machine), two jobs. The result is cached inside the working tree:
#   .cache/engine/llama-server          the binary
#   .cache/engine/llama-server.version  the sdist it came from and the cmake flags
#   .cache/engine/llama-server.build-seconds  how long the compile took, and with how many jobs
# A second call with the same version and flags does nothing. Usage: bash .ci/build-llama-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${ENGINE_BUILD_JOBS:-2}"
OUT=.cache/engine
SRC=.cache/engine-src
FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF"
STAMP_TEXT="llama-cpp-python==$VERSION $FLAGS"
if [ -x "$OUT/llama-server" ] && [ "$(cat "$OUT/llama-server.version" 2>/dev/null)" = "$STAMP_TEXT" ]; then
  echo "llama-server already built: $OUT/llama-server (llama-cpp-python==$VERSION)"
  exit 0
fi
mkdir -p "$OUT" "$SRC"
SDIST="$SRC/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$SRC" "llama-cpp-python==$VERSION"
fi
TREE="$SRC/llama_cpp_python-$VERSION"
[ -d "$TREE/vendor/llama.cpp" ] || tar -xzf "$SDIST" -C "$SRC"
start=$(date +%s)
# shellcheck disable=SC2086
cmake -S "$TREE/vendor/llama.cpp" -B "$SRC/build" -G Ninja $FLAGS >"$SRC/configure.log" 2>&1 \
  || { tail -n 30 "$SRC/configure.log"; exit 1; }
cmake --build "$SRC/build" --target llama-server -j "$JOBS" >"$SRC/build.log" 2>&1 \
  || { tail -n 30 "$SRC/build.log"; exit 1; }
cp "$SRC/build/bin/llama-server" "$OUT/llama-server.tmp" && mv "$OUT/llama-server.tmp" "$OUT/llama-server"
echo "$STAMP_TEXT" >"$OUT/llama-server.version"
echo "$(( $(date +%s) - start )) $JOBS" >"$OUT/llama-server.build-seconds"
echo "built $OUT/llama-server from llama-cpp-python==$VERSION in $(( $(date +%s) - start ))s ($JOBS jobs)"
