#!/usr/bin/env bash
# Throughput and idle latency measured as a user would: 3 masters and one slave declaring
# 16 CPUs, default flags (secured, fsync on, cgroups when run as root), every step a fresh
# `hetsched` command.
#  1. `submit --count 3000 --cpus 1 --mem 16 -- true`, then `tasks --json --job J` every
#     0.3 s until every task is final: tasks/s from the submit's start.
#  2. On the idle cluster, 15 times each, alternating: a fresh `hetsched submit` of a task
#     that records the time it starts, against the time the shell read (`$EPOCHREALTIME`, no
#     fork) just before it ran `submit`; the task's output is found as the new file in the
#     slave's logs (no other command runs while the task starts). Two tasks:
#     - `first-instruction` (docs/first-instruction.c, built here with `cc` when there is
#       one; x86-64): reads the clock at its first instruction, before any loader or libc;
#     - `bash -c 'echo $EPOCHREALTIME'`: what a shell task sees, bash's own start-up
#       (≈ 2 ms of loader, libc and bash here) included.
# Usage: [KEEP=1] [IDLE=0] [SAMPLES=N] [PROBE_ONLY=1] docs/bench-user.sh [path/to/hetsched] [COUNT]
# (KEEP=1 keeps the data dir and its logs; IDLE=0 skips part 2; COUNT=0 skips part 1;
# SAMPLES=N takes N idle submits of each task instead of 15; PROBE_ONLY=1 times only the
# first-instruction probe — `SAMPLES=40 PROBE_ONLY=1 docs/bench-user.sh BIN 0` compares two
# binaries in alternating runs with more samples; HETSCHED_LOG=info,hetsched::trace=debug
# logs every hop of a submit with timestamps.)
set -euo pipefail
BIN=$(realpath "${1:-target/release/hetsched}")
COUNT=${2:-3000}
DIR=$(mktemp -d)
port() { echo $((20000 + RANDOM % 20000)); }
M1=127.0.0.1:$(port); M2=127.0.0.1:$(port); M3=127.0.0.1:$(port); S=127.0.0.1:$(port)
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
"$BIN" certs init "$DIR/ca" >/dev/null
for i in 1 2 3; do "$BIN" certs issue "$DIR/ca" --role master --name "$i" --out "$DIR/c$i" >/dev/null; done
"$BIN" certs issue "$DIR/ca" --role slave --name s1 --out "$DIR/cs" >/dev/null
"$BIN" certs issue "$DIR/ca" --role client --name root --out "$DIR/cc" >/dev/null
PEERS="1=$M1,2=$M2,3=$M3"
i=0
for m in $M1 $M2 $M3; do
  i=$((i + 1))
  "$BIN" master --id $i --listen "$m" --peers "$PEERS" --data-dir "$DIR/m$i" \
    --certs-dir "$DIR/c$i" 2>"$DIR/m$i.log" & PIDS+=($!)
done
"$BIN" slave --listen "$S" --masters "$M1,$M2,$M3" --data-dir "$DIR/s" --cpus 16 \
  --mem 65536 --certs-dir "$DIR/cs" 2>"$DIR/s.log" & PIDS+=($!)
export HETSCHED_MASTERS=$M1,$M2,$M3 HETSCHED_CERTS_DIR=$DIR/cc HETSCHED_CLIENT_TIMEOUT_MS=30000
until "$BIN" status --json 2>/dev/null | grep -q '"up":1'; do sleep 0.2; done
sleep 1
now() { date +%s%N; }
if [ "$COUNT" != 0 ]; then
t0=$(now)
job=$("$BIN" submit --json --count "$COUNT" --cpus 1 --mem 16 -- true | grep -o '"job_id":[0-9]*' | head -1 | cut -d: -f2)
while :; do
  final=$("$BIN" tasks --json --job "$job" | { grep -oE '"state":"(succeeded|failed|cancelled)"' || true; } | wc -l)
  [ "$final" -ge "$COUNT" ] && break
  sleep 0.3
done
t1=$(now)
echo "throughput: $COUNT tasks final in $(( (t1 - t0) / 1000000 )) ms: $(( COUNT * 1000000000 / (t1 - t0) )) tasks/s"
failed=$("$BIN" tasks --json --job "$job" | grep -c '"state":"failed"' || true)
echo "failed: $failed"
fi
[ "${IDLE:-15}" = 0 ] && exit 0
sleep 2
PROBE=
if command -v cc >/dev/null && [ "$(uname -m)" = x86_64 ] &&
  cc -O2 -static -nostdlib -fno-stack-protector -o "$DIR/first-instruction" \
    "$(dirname "$0")/first-instruction.c" 2>/dev/null; then
  PROBE=$DIR/first-instruction
fi
. "$(dirname "$0")/bench-idle.sh"
SAMPLES=${SAMPLES:-15}
lat=() plat=()
for k in $(seq "$SAMPLES"); do
  if [ -n "$PROBE" ]; then plat+=("$(idle_once --mem 16 -- "$PROBE")"); sleep 0.5; fi
  if [ "${PROBE_ONLY:-0}" != 1 ]; then
    lat+=("$(idle_once --mem 16 -- bash -c 'echo $EPOCHREALTIME')")
    sleep 0.5
  fi
done
if [ -n "$PROBE" ]; then
  report "idle submit -> first instruction" "${plat[@]}"
else
  echo "no first-instruction probe (needs cc on x86-64): bash's figure only"
fi
[ "${PROBE_ONLY:-0}" = 1 ] || report "idle submit -> bash's first command" "${lat[@]}"
