#!/usr/bin/env bash
# Three masters and two slaves on loopback, as separate processes (Ctrl-C stops them all).
# Usage: deploy/local-cluster.sh [DATA_DIR]   (needs `hetsched` on PATH or HETSCHED=path)
set -euo pipefail
BIN=${HETSCHED:-hetsched}
DIR=${1:-/tmp/hetsched-local}
PEERS=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
MASTERS=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
mkdir -p "$DIR"
# Secured like a deployment: a CA, one certificate per process, the administrator's client one.
if [ ! -f "$DIR/certs/ca/ca.crt" ]; then
  "$BIN" certs init "$DIR/certs/ca" >/dev/null
  for i in 1 2 3; do "$BIN" certs issue "$DIR/certs/ca" --role master --name $i --out "$DIR/certs/master-$i" >/dev/null; done
  for i in 1 2; do "$BIN" certs issue "$DIR/certs/ca" --role slave --name slave-$i --out "$DIR/certs/slave-$i" >/dev/null; done
  "$BIN" certs issue "$DIR/certs/ca" --role client --name root --out "$DIR/certs/client" >/dev/null
fi
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT INT TERM
for i in 1 2 3; do
  "$BIN" master --id $i --listen 127.0.0.1:700$i --peers $PEERS --data-dir "$DIR/master-$i" \
    --certs-dir "$DIR/certs/master-$i" --http 127.0.0.1:910$i 2>"$DIR/master-$i.log" &
done
"$BIN" slave --listen 127.0.0.1:7101 --masters $MASTERS --data-dir "$DIR/slave-1" --cpus 4 --mem 4096 \
  --certs-dir "$DIR/certs/slave-1" \
  2>"$DIR/slave-1.log" &
"$BIN" slave --listen 127.0.0.1:7102 --masters $MASTERS --data-dir "$DIR/slave-2" --cpus 4 --mem 8192 \
  --certs-dir "$DIR/certs/slave-2" \
  --gpus 2 --gpu-model T4 2>"$DIR/slave-2.log" &
echo "cluster up; try:"
echo "export HETSCHED_MASTERS=$MASTERS"
echo "export HETSCHED_CERTS_DIR=$DIR/certs/client"
echo "$BIN status"
wait
