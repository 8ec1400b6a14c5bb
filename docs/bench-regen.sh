#!/usr/bin/env bash
# Reruns the BENCHMARKS.md commands that need no trace file, no GPU and no root, one at a
# time, and keeps each one's output under OUT (default /tmp/hetsched-bench-DATE-COMMIT/), so a table
# can be refreshed from it. Slow ones (minutes) are marked; pick with ONLY=anchor,anchor.
#   docs/bench-regen.sh [--list]            BIN=target/release/hetsched OUT=dir ONLY=raft,e2e
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/hetsched}
# anchor in BENCHMARKS.md | command (BIN is replaced)
CMDS=(
  "raft|BIN bench raft --masters 3 --clients 8 --proposals 100000 --json"
  "failover|BIN bench failover --rounds 10 --json"
  "placement|BIN bench placement --nodes 10000 --tasks 200000 --policy least-fit --json"
  "planner-vs-uniform-lpt|cargo run --release -p hetsched-planner --example plan_vs_lpt -- 100"
  "throughput-and-idle-submit|IDLE=0 docs/bench-user.sh BIN 3000"
  "throughput-and-idle-submit|SAMPLES=40 PROBE_ONLY=1 docs/bench-user.sh BIN 0"
  "e2e|BIN bench e2e --tasks 3000 --job-size 3000 --json"
  "e2e|BIN bench e2e --masters 3 --slaves 4 --slave-cpus 100000 --tasks 50000 --job-size 10000 --in-process-slaves --json"
  "bench-scale|BIN bench scale --slaves 2000 --tasks 20000 --json"
  "flows|BIN bench flow --width 1000 --rounds 3 --json"
  "blocked-plan|cargo bench -p hetsched-master-core --bench blocked_plan -- --tasks 3000"
  "cli|docs/bench-cli.sh BIN"
  "s3-sim|BIN sim --scenario docs/sim/s3-burst.toml --mode timed --compare fifo-best-fit,drf-best-fit,pipeline-frag"
  "slave-queues|BIN bench e2e --masters 3 --slaves 1 --slave-cpus 2 --tasks 100 --job-size 4 --rate 4 --command 'sleep 0.2' --queue-depth 4 --json"
  "model-check|cargo test -p hetsched-master-core --test model_check"
)
if [ "${1:-}" = --list ]; then
  for c in "${CMDS[@]}"; do printf '%-28s %s\n' "${c%%|*}" "${c#*|}"; done
  exit 0
fi
OUT=${OUT:-${TMPDIR:-/tmp}/hetsched-bench-$(date -u +%F)-$(git rev-parse --short HEAD)}
mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || true
n=0
for c in "${CMDS[@]}"; do
  anchor=${c%%|*}; cmd=${c#*|}; cmd=${cmd//BIN/$BIN}; n=$((n + 1))
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$anchor,"* ]]; then continue; fi
  echo "== $anchor: $cmd"
  { echo "# $cmd"; echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$OUT/$n-$anchor.txt"
  bash -c "$cmd" >> "$OUT/$n-$anchor.txt" 2>&1 || echo "   failed (exit $?), see $OUT/$n-$anchor.txt"
done
echo "outputs in $OUT"
