#!/usr/bin/env bash
# Coverage-guided fuzzing of the wire parsers and the request engine with libFuzzer, on stable
# Rust: the targets in fuzz/fuzz_targets/ are built with LLVM's SanitizerCoverage passes
# (the flags below) and linked with libFuzzer from the libfuzzer-sys crate (a C++ compiler
# builds it), so neither nightly nor cargo-fuzz is needed.
#
#   scripts/fuzz.sh [TARGET|all] [DURATION] [CORPUS_DIR]
#       TARGET      binary, text, meta, engine, or all (default: all, one after the other)
#       DURATION    per target: seconds, or a number with s, m or h (default: 60s)
#       CORPUS_DIR  the working corpus, one subdirectory per target (default:
#                   target/fuzz/corpus); every run also reads the checked-in seeds in
#                   fuzz/corpus/TARGET, and keeps what it finds in CORPUS_DIR/TARGET
#   scripts/fuzz.sh replay TARGET FILE...    runs inputs once (MEMSPIN_FUZZ_TRACE=1 prints the
#                                            engine target's pipeline and schedule)
#   scripts/fuzz.sh minimize TARGET FILE     shrinks a crashing input to FILE.min
#
# Crashes (a panic: a failed check, or a panic in the code under test) are written to
# target/fuzz/artifacts/TARGET/; the script then exits non-zero and names them. FUZZ_JOBS=N
# runs N fuzzing processes per target (default 1: the machine may be shared); FUZZ_KEEP_GOING=1
# goes on after a crash (libFuzzer's fork mode), to collect every failing input of a long run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

TARGETS=(binary text meta engine)
# Longest input per target: a text line must be able to pass the 2,048-byte limit.
declare -A MAX_LEN=([binary]=4096 [text]=8192 [meta]=2048 [engine]=16384)

build_targets() {
  command -v c++ >/dev/null || die "libFuzzer needs a C++ compiler (apt-get install g++)"
  HOST=$(rustc -vV | sed -n 's/^host: //p')
  FUZZ_DIR=target/fuzz
  step "cargo build (fuzz targets, coverage-instrumented)"
  # --target keeps the instrumentation off build scripts and proc macros; a target dir of its
  # own keeps these flags from rebuilding the ordinary one.
  RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cdebug-assertions -Coverflow-checks" \
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo build -q --release -p fuzz --features libfuzzer --bins \
    --target "$HOST" --target-dir "$FUZZ_DIR/build"
  BIN_DIR=$FUZZ_DIR/build/$HOST/release
}

seconds() {
  local d=$1
  case $d in
    *h) echo $((${d%h} * 3600)) ;;
    *m) echo $((${d%m} * 60)) ;;
    *s) echo "${d%s}" ;;
    *) echo "$d" ;;
  esac
}

check_target() {
  local t
  for t in "${TARGETS[@]}"; do [ "$1" = "$t" ] && return 0; done
  die "unknown target '$1' (one of: ${TARGETS[*]})"
}

case ${1:-all} in
  replay)
    [ $# -ge 3 ] || die "usage: scripts/fuzz.sh replay TARGET FILE..."
    check_target "$2"
    build_targets
    exec "$BIN_DIR/$2" "${@:3}"
    ;;
  minimize)
    [ $# -eq 3 ] || die "usage: scripts/fuzz.sh minimize TARGET FILE"
    check_target "$2"
    build_targets
    exec "$BIN_DIR/$2" -minimize_crash=1 -max_total_time=300 -exact_artifact_path="$3.min" "$3"
    ;;
esac

target=${1:-all}
duration=$(seconds "${2:-60s}")
corpus_root=${3:-target/fuzz/corpus}
[[ $duration =~ ^[0-9]+$ ]] && [ "$duration" -gt 0 ] || die "bad duration '${2:-}'"
if [ "$target" = all ]; then
  targets=("${TARGETS[@]}")
else
  check_target "$target"
  targets=("$target")
fi

build_targets
failed=()
summary=()
for t in "${targets[@]}"; do
  work=$corpus_root/$t
  artifacts=target/fuzz/artifacts/$t
  log=target/fuzz/$t.log
  mkdir -p "$work" "$artifacts"
  step "fuzz $t for ${duration}s (corpus $work, seeds fuzz/corpus/$t)"
  parallel=()
  if [ "${FUZZ_KEEP_GOING:-0}" = 1 ]; then
    parallel=(-fork="${FUZZ_JOBS:-1}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  elif [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
    parallel=(-fork="$FUZZ_JOBS")
  fi
  found_before=$(find "$artifacts" -type f ! -name 'slow-unit-*' | wc -l)
  status=0
  "$BIN_DIR/$t" -max_total_time="$duration" -max_len="${MAX_LEN[$t]}" -timeout=20 \
    -rss_limit_mb=4096 "${parallel[@]}" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "$work" "fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  # The last status line ("#N DONE cov: ... ft: ... corp: ...") and the final statistics.
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  # Fork mode prints no final statistics; its status lines start with the runs so far.
  [ -n "$runs" ] || runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  summary+=("$(printf '%-7s %12s runs  %s' "$t" "${runs:-?}" "${last#* }")")
  # In keep-going mode libFuzzer exits 0 after crashes: count what it wrote instead.
  if [ "$(find "$artifacts" -type f ! -name 'slow-unit-*' | wc -l)" -gt "$found_before" ]; then
    status=1
  fi
  if [ "$status" -ne 0 ]; then
    failed+=("$t")
    grep -E 'panicked at|ERROR: libFuzzer|Test unit written' "$log" | head -n 8 >&2 || true
    printf 'full log: %s\n' "$log" >&2
  fi
done

step "fuzz summary (${duration}s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  die "fuzzing found crashes in: ${failed[*]} (inputs in target/fuzz/artifacts/; replay one with scripts/fuzz.sh replay TARGET FILE)"
fi
