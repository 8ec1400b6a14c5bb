#!/usr/bin/env bash
# CLI round-trip times (issue 17): one master, one slave, 10 jobs x 1,000 tasks kept
# pending (they ask for more cores than the slave has, so nothing runs), then each command
# 10 times; prints median and max wall time per command, process start included.
# Secured (certificates, mutual TLS) by default; INSECURE=1 runs both processes --insecure;
# TOKEN=1 runs secured with the CLI authenticated by an API token (HETSCHED_TOKEN, only
# ca.crt in HETSCHED_CERTS_DIR) instead of its client certificate.
# Usage: [INSECURE=1 | TOKEN=1] docs/bench-cli.sh [path/to/hetsched]
set -euo pipefail
BIN=${1:-target/release/hetsched}
DIR=$(mktemp -d)
M=127.0.0.1:$((20000 + RANDOM % 10000)); S=127.0.0.1:$((30000 + RANDOM % 10000))
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"; }
PIDS=(); trap cleanup EXIT
if [ "${INSECURE:-0}" = 1 ]; then
  MSEC=(--insecure); SSEC=(--insecure); unset HETSCHED_CERTS_DIR
else
  "$BIN" certs init "$DIR/ca" >/dev/null
  "$BIN" certs issue "$DIR/ca" --role master --name 1 --out "$DIR/cm" >/dev/null
  "$BIN" certs issue "$DIR/ca" --role slave --name s1 --out "$DIR/cs" >/dev/null
  "$BIN" certs issue "$DIR/ca" --role client --name root --out "$DIR/cc" >/dev/null
  MSEC=(--certs-dir "$DIR/cm"); SSEC=(--certs-dir "$DIR/cs"); export HETSCHED_CERTS_DIR=$DIR/cc
fi
"$BIN" master --id 1 --listen "$M" --peers "1=$M" --data-dir "$DIR/m" "${MSEC[@]}" 2>"$DIR/m.log" & PIDS+=($!)
"$BIN" slave --listen "$S" --masters "$M" --data-dir "$DIR/s" --cpus 4 --mem 4096 "${SSEC[@]}" 2>"$DIR/s.log" & PIDS+=($!)
export HETSCHED_MASTERS=$M HETSCHED_CLIENT_TIMEOUT_MS=30000
until "$BIN" status --json 2>/dev/null | grep -q '"up":1'; do sleep 0.2; done
if [ "${TOKEN:-0}" = 1 ]; then
  HETSCHED_TOKEN=$("$BIN" acl bootstrap); export HETSCHED_TOKEN
  mkdir -p "$DIR/ca-only"; cp "$DIR/cc/ca.crt" "$DIR/ca-only/"; export HETSCHED_CERTS_DIR=$DIR/ca-only
fi
for j in $(seq 10); do "$BIN" submit --json --count 1000 --cpus 64 --allow-unplaceable -- true >/dev/null; done
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
bench() {
  local t=()
  for _ in $(seq 10); do t+=("$(ms "$BIN" "$@")"); done
  mapfile -t t < <(printf '%s\n' "${t[@]}" | sort -n)
  printf '| `hetsched %s` | %s | %s |\n' "$*" "${t[5]}" "${t[9]}"
}
echo "| command | median ms | max ms |"
echo "|---|---:|---:|"
bench submit --json --cpus 64 --allow-unplaceable -- true
bench status --json
bench status
bench jobs --json
bench jobs
bench tasks --json
bench tasks --json --limit 10
bench tasks --json --state failed --user nobody
bench tasks --json --job 5
bench jobs 999999
HETSCHED_MASTERS=127.0.0.1:1 HETSCHED_CLIENT_TIMEOUT_MS=1000 bench status
