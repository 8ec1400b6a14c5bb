#!/usr/bin/env bash
# Idle submit -> first instruction, N times (default 40), 0.5 s apart, on a fresh secured
# cluster of 3 masters and one 16-CPU slave (default flags): more samples per run than
# docs/bench-user.sh's 15, for comparing two binaries in alternating runs. Prints p50, p90
# and min in microseconds. Needs cc (x86-64) for docs/first-instruction.c.
# Usage: docs/bench-idle.sh BIN [N]
set -euo pipefail
BIN=$(realpath "$1"); N=${2:-40}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
port() { echo $((20000 + RANDOM % 20000)); }
M1=127.0.0.1:$(port); M2=127.0.0.1:$(port); M3=127.0.0.1:$(port); S=127.0.0.1:$(port)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
cc -O2 -static -nostdlib -fno-stack-protector -o "$DIR/first-instruction" "$HERE/first-instruction.c"
"$BIN" certs init "$DIR/ca" >/dev/null
for i in 1 2 3; do "$BIN" certs issue "$DIR/ca" --role master --name "$i" --out "$DIR/c$i" >/dev/null; done
"$BIN" certs issue "$DIR/ca" --role slave --name s1 --out "$DIR/cs" >/dev/null
"$BIN" certs issue "$DIR/ca" --role client --name root --out "$DIR/cc" >/dev/null
i=0
for m in $M1 $M2 $M3; do
  i=$((i + 1))
  "$BIN" master --id $i --listen "$m" --peers "1=$M1,2=$M2,3=$M3" --data-dir "$DIR/m$i" \
    --certs-dir "$DIR/c$i" 2>"$DIR/m$i.log" & PIDS+=($!)
done
"$BIN" slave --listen "$S" --masters "$M1,$M2,$M3" --data-dir "$DIR/s" --cpus 16 \
  --mem 65536 --certs-dir "$DIR/cs" 2>"$DIR/s.log" & PIDS+=($!)
export HETSCHED_MASTERS=$M1,$M2,$M3 HETSCHED_CERTS_DIR=$DIR/cc HETSCHED_CLIENT_TIMEOUT_MS=30000
until "$BIN" status --json 2>/dev/null | grep -q '"up":1'; do sleep 0.2; done
sleep 1
lat=()
for _ in $(seq "$N"); do
  s=${EPOCHREALTIME//[!0-9]/}
  out=$("$BIN" submit --json --cpus 1 --mem 16 -- "$DIR/first-instruction")
  [[ $out =~ \"job_id\":([0-9]+) ]] && j=${BASH_REMATCH[1]}
  t=$("$BIN" tasks --json --job "$j" | grep -o '"id":[0-9]*' | head -1 | cut -d: -f2)
  f=$DIR/s/logs/task-$t-1.out
  for _ in $(seq 200); do [ -s "$f" ] && break; sleep 0.05; done
  e=$(tr -cd 0-9 <"$f")
  lat+=($((e - s)))
  sleep 0.5
done
mapfile -t sorted < <(printf '%s\n' "${lat[@]}" | sort -n)
echo "idle submit -> first instruction ($N): p50 ${sorted[$((N / 2))]} p90 ${sorted[$((N * 9 / 10))]} min ${sorted[0]} us"
