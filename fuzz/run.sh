#!/usr/bin/env bash
# Builds every libFuzzer target (clang, ASan + UBSan) in build-fuzz/, replays the saved crash inputs of each
# (fuzz/regressions/<name>/), then fuzzes each for a bounded time. Fails if any input crashes.
#   FUZZ_SECONDS   seconds of fuzzing per target (default: 30, less when many targets share FUZZ_TOTAL_SECONDS)
#   FUZZ_TOTAL_SECONDS  fuzzing budget for all targets together when FUZZ_SECONDS is unset (default 150)
#   FUZZ_BUILD_DIR build directory (default build-fuzz)
#   FUZZ_JOBS      build parallelism (default 2)
# Per target, optional: fuzz/corpus/<name>/ seeds, fuzz/<name>.dict, fuzz/<name>.flags (extra libFuzzer flags on
# one line, e.g. -max_len=65536; they override the defaults below).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(fuzz/fuzz_*.cc)
if [ -n "${FUZZ_SECONDS:-}" ]; then
  seconds=$FUZZ_SECONDS
else
  # CI runs on 2 cores: keep the whole fuzz step within a few minutes however many targets exist.
  seconds=$(( ${FUZZ_TOTAL_SECONDS:-150} / ${#targets[@]} ))
  if (( seconds > 30 )); then seconds=30; fi
  if (( seconds < 10 )); then seconds=10; fi
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-2}

cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBLOOMERY_FUZZ=ON \
  -DBLOOMERY_CUDA=OFF -DBLOOMERY_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz_all

failed=()
for source in "${targets[@]}"; do
  target=$(basename "$source" .cc)
  name=${target#fuzz_}
  bin="$build/fuzz/$target"
  artifacts="$build/fuzz-artifacts/$name"
  work="$build/fuzz-corpus/$name"  # grows while fuzzing; the checked-in seeds stay untouched
  mkdir -p "$artifacts" "$work"
  # Keep the sanitizers strict: any report is a failure.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

  # 1. Every earlier crash input must now pass.
  if [ -d "fuzz/regressions/$name" ] && [ -n "$(ls -A "fuzz/regressions/$name")" ]; then
    echo "fuzz/run.sh: $target: replaying fuzz/regressions/$name"
    if ! "$bin" -runs=1 "fuzz/regressions/$name"/* >"$artifacts/regressions.log" 2>&1; then
      tail -n 40 "$artifacts/regressions.log"
      failed+=("$target (regression replay)")
      continue
    fi
  fi

  # 2. Bounded fuzzing from the seeds.
  flags=(-max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  [ -f "fuzz/$name.dict" ] && flags+=(-dict="fuzz/$name.dict")
  if [ -f "fuzz/$name.flags" ]; then
    read -r -a extra <"fuzz/$name.flags"
    flags+=("${extra[@]}")
  fi
  corpora=("$work")
  [ -d "fuzz/corpus/$name" ] && corpora+=("fuzz/corpus/$name")
  echo "fuzz/run.sh: $target: fuzzing ${seconds} s"
  if ! "$bin" "${flags[@]}" "${corpora[@]}" >"$artifacts/fuzz.log" 2>&1; then
    tail -n 60 "$artifacts/fuzz.log"
    failed+=("$target (crash input in $artifacts/; copy it to fuzz/regressions/$name/ once fixed)")
    continue
  fi
  grep -E '^stat::number_of_executed_units|^Done' "$artifacts/fuzz.log" | tr '\n' ' '
  echo
done

if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz/run.sh: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "fuzz/run.sh: all fuzz targets passed"
