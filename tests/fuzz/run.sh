#!/usr/bin/env bash
# Builds the IR parser's libFuzzer target (clang, -DKILN_FUZZ=ON) and runs it
# for $1 seconds (default 60) over tests/fuzz/corpus. New inputs go to a
# scratch corpus, so the committed one changes only by hand; a crash or a
# round-trip mismatch fails the run and leaves its input in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-fuzz --target fuzz_ir_parse
mkdir -p build-fuzz/corpus build-fuzz/artifacts
build-fuzz/tests/fuzz/fuzz_ir_parse -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 \
  build-fuzz/corpus tests/fuzz/corpus
