#!/usr/bin/env bash
# `make bench`: generate captures from real PostgreSQL 18, run the criterion benchmarks, the
# Python comparison and the live drain, then regenerate BENCHMARKS.md from their results.
#
# Variables: PGOUTPUT_BENCH_MB (text-mode MB per capture, default 30), PGOUTPUT_BENCH_RUNS
# (Python runs per median, default 5), PGOUTPUT_LIVE_CHANGES (default 1000000),
# PGOUTPUT_LIVE_REPS (default 3), PGOUTPUT_DELTA_CHANGES (default 300000), PGOUTPUT_DELTA_REPS
# (default 3), PGOUTPUT_SNAPSHOT_SCALE (pgbench scale of the snapshot bench, default 10; 100 is
# the 1.3 GB table), PGOUTPUT_SNAPSHOT_WIDE_ROWS (default 1000000), PGOUTPUT_BENCH_DATA
# (default bench-data/),
# CRITERION_ARGS (default "--warm-up-time 1 --measurement-time 3"), PY (default .venv/bin/python),
# BENCH_STEPS (default "gen criterion compare cli live delta snapshot online profile spark
# sparkstream report"; sparkstream: the Spark streaming source against stream() and Spark's own
# floor on a backlog of PGOUTPUT_STREAM_CHANGES changes, default 1000000, its output in
# bench-data/spark_stream.{txt,json}; a report of a run of some steps keeps the other sections
# of the BENCHMARKS.md before it, marked as such), PGOUTPUT_CLI_MB (the cli step's pgbench
# capture, default 256),
# BENCH_COMMAND (what BENCHMARKS.md says was run).
#
# `benches/run.sh spark` runs only the Spark part (issue 22): the Spark captures (made once,
# kept in bench-data/spark/), decode against the identity-mapInArrow floor on local[2] and
# local[1], the profile of decode on the pgbench capture, and BENCHMARKS.md's Spark section
# rewritten in place. Its variables: PGOUTPUT_SPARK_RUNS (measured rounds, default 3),
# PGOUTPUT_SPARK_MASTERS (default "local[2],local[1]"), PGOUTPUT_SPARK_CAPTURES (default
# "pgbench,streamed,toast,tables"), PGOUTPUT_SPARK_BIG_MB (the big table, default 1050).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
export PGOUTPUT_BENCH_DATA=${PGOUTPUT_BENCH_DATA:-$PWD/bench-data}
export PGOUTPUT_BENCH_MB=${PGOUTPUT_BENCH_MB:-30}
CRITERION_ARGS=${CRITERION_ARGS:---warm-up-time 1 --measurement-time 3}
STEPS=${BENCH_STEPS:-gen criterion compare cli live delta snapshot online profile spark sparkstream report}
if [[ "${1:-}" == spark ]]; then
  STEPS="spark"
  COMMAND=${BENCH_COMMAND:-"benches/run.sh spark"}
fi
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
COMMAND=${COMMAND:-${BENCH_COMMAND:-"make bench PGOUTPUT_BENCH_MB=$PGOUTPUT_BENCH_MB"}}

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
if step cli; then
  echo "== pgoutput-dump drained to /dev/null: jsonl, pretty, parquet"
  # Its own pgbench capture of PGOUTPUT_CLI_MB (default 256): the size issue 23's jsonl
  # target is set on (made once, kept in bench-data/cli/).
  "$PY" benches/cli_drain.py --data "$PGOUTPUT_BENCH_DATA/cli" --mb "${PGOUTPUT_CLI_MB:-256}" \
    --runs "${PGOUTPUT_BENCH_RUNS:-3}" --out "$PGOUTPUT_BENCH_DATA/cli.json"
fi
if step live; then
  echo "== live: draining a slot"
  "$PY" benches/live.py --out "$PGOUTPUT_BENCH_DATA/live.json"
fi
if step delta; then
  echo "== live into Delta Lake (replica, change log) vs Parquet change files vs pg_recvlogical"
  "$PY" benches/delta_sink.py --out "$PGOUTPUT_BENCH_DATA/delta.json"
fi
if step snapshot; then
  echo "== snapshot: COPY binary to Arrow vs the COPY drain and pg_dump, 1/2/4 connections"
  "$PY" benches/snapshot_throughput.py --scale "${PGOUTPUT_SNAPSHOT_SCALE:-10}" \
    --runs "${PGOUTPUT_BENCH_RUNS:-3}" --out "$PGOUTPUT_BENCH_DATA/snapshot.json"
fi
if step online; then
  echo "== online snapshot: chunks while the stream flows vs the exported snapshot and the COPY drain, writes running"
  "$PY" benches/online_snapshot.py --scale "${PGOUTPUT_SNAPSHOT_SCALE:-10}" \
    --runs "${PGOUTPUT_BENCH_RUNS:-3}" --out "$PGOUTPUT_BENCH_DATA/online_snapshot.json"
fi
if step profile; then
  # Where the decoder's time goes on the pgbench captures: a sampling profile (cpu-clock, so
  # it works without hardware counters) of the criterion decode benchmark.
  if command -v perf >/dev/null && perf record -e cpu-clock -o /dev/null true >/dev/null 2>&1; then
    BIN=$(cargo bench -p pgoutput-arrow --bench decode --no-run --message-format=json 2>/dev/null |
      "$PY" -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "decode":
        print(m["executable"])')
    for cap in pgbench-binary pgbench-text; do
      echo "== perf profile of decode/$cap"
      PGOUTPUT_BENCH_ONLY=$cap perf record -q -e cpu-clock -F 999 -o "$PGOUTPUT_BENCH_DATA/perf-$cap.data" \
        "$BIN" --bench --profile-time 5 >/dev/null 2>&1
      perf report -i "$PGOUTPUT_BENCH_DATA/perf-$cap.data" --no-children --sort symbol --stdio 2>/dev/null |
        grep -v '^#' | grep -v '^$' | sed -n 1,25p > "$PGOUTPUT_BENCH_DATA/profile-$cap.txt"
    done
  else
    echo "== perf is not usable here: no profile"
  fi
fi
if step spark; then
  SPARK_CAPTURES=${PGOUTPUT_SPARK_CAPTURES:-pgbench,streamed,toast,tables}
  echo "== Spark captures ($SPARK_CAPTURES) into $PGOUTPUT_BENCH_DATA/spark"
  "$PY" benches/gen_captures.py --spark --only "$SPARK_CAPTURES" --out "$PGOUTPUT_BENCH_DATA"
  echo "== Spark: decode against the identity-mapInArrow floor"
  "$PY" benches/spark_throughput.py --data "$PGOUTPUT_BENCH_DATA/spark" --captures "$SPARK_CAPTURES" \
    --masters "${PGOUTPUT_SPARK_MASTERS:-local[2],local[1]}" --runs "${PGOUTPUT_SPARK_RUNS:-3}" \
    --out "$PGOUTPUT_BENCH_DATA/spark.json"
  if [[ ",$SPARK_CAPTURES," == *,pgbench,* ]]; then
    echo "== Spark: where decode's time goes on the pgbench capture"
    "$PY" benches/spark_throughput.py --data "$PGOUTPUT_BENCH_DATA/spark" --profile pgbench >/dev/null
  fi
  if ! step report; then
    "$PY" benches/report.py --data "$PGOUTPUT_BENCH_DATA" --spark-only BENCHMARKS.md
    echo "== rewrote BENCHMARKS.md's Spark section"
  fi
fi
if step sparkstream; then
  echo "== Spark streaming source against stream() on a backlog"
  "$PY" benches/spark_stream_throughput.py --rows "${PGOUTPUT_STREAM_CHANGES:-1000000}" --runs 3 \
    --out "$PGOUTPUT_BENCH_DATA/spark_stream.json" | tee "$PGOUTPUT_BENCH_DATA/spark_stream.txt"
fi
if step report; then
  # Sections of steps this run left out are kept from the BENCHMARKS.md before it, said so.
  "$PY" benches/report.py --data "$PGOUTPUT_BENCH_DATA" --criterion "$TARGET_DIR/criterion" \
    --command "$COMMAND" --previous BENCHMARKS.md > "$PGOUTPUT_BENCH_DATA/BENCHMARKS.md"
  mv "$PGOUTPUT_BENCH_DATA/BENCHMARKS.md" BENCHMARKS.md
  echo "== wrote BENCHMARKS.md"
fi
