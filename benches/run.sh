#!/usr/bin/env bash
# `make bench`: generate captures from real PostgreSQL 18, run the criterion benchmarks, the
# Python comparison and the live drain, then regenerate BENCHMARKS.md from their results.
#
# Variables: PGOUTPUT_BENCH_MB (text-mode MB per capture, default 30), PGOUTPUT_BENCH_RUNS
# (Python runs per median, default 5), PGOUTPUT_LIVE_CHANGES (default 1000000),
# PGOUTPUT_LIVE_REPS (default 3), PGOUTPUT_BENCH_DATA (default bench-data/),
# CRITERION_ARGS (default "--warm-up-time 1 --measurement-time 3"), PY (default .venv/bin/python),
# BENCH_STEPS (default "gen criterion compare live report").
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
export PGOUTPUT_BENCH_DATA=${PGOUTPUT_BENCH_DATA:-$PWD/bench-data}
export PGOUTPUT_BENCH_MB=${PGOUTPUT_BENCH_MB:-30}
CRITERION_ARGS=${CRITERION_ARGS:---warm-up-time 1 --measurement-time 3}
STEPS=${BENCH_STEPS:-gen criterion compare live report}
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
COMMAND="make bench PGOUTPUT_BENCH_MB=$PGOUTPUT_BENCH_MB"

step() { [[ " $STEPS " == *" $1 "* ]]; }

if step gen; then
  echo "== captures ($PGOUTPUT_BENCH_MB MB each) into $PGOUTPUT_BENCH_DATA"
  "$PY" benches/gen_captures.py --mb "$PGOUTPUT_BENCH_MB" --out "$PGOUTPUT_BENCH_DATA"
fi
if step criterion; then
  echo "== criterion: parser (with memcpy and pg_walstream), then Arrow decoder"
  rm -rf "$TARGET_DIR/criterion"
  # shellcheck disable=SC2086
  cargo bench -p pgoutput-proto --bench parse -- $CRITERION_ARGS
  # shellcheck disable=SC2086
  cargo bench -p pgoutput-arrow --bench decode -- $CRITERION_ARGS
fi
if step compare; then
  echo "== Python: pgoutput_arrow.decode vs pypgoutput vs a kind-byte loop"
  "$PY" benches/compare.py --data "$PGOUTPUT_BENCH_DATA"
fi
if step live; then
  echo "== live: draining a slot"
  "$PY" benches/live.py --out "$PGOUTPUT_BENCH_DATA/live.json"
fi
if step report; then
  "$PY" benches/report.py --data "$PGOUTPUT_BENCH_DATA" --criterion "$TARGET_DIR/criterion" \
    --command "$COMMAND" > BENCHMARKS.md
  echo "== wrote BENCHMARKS.md"
fi
