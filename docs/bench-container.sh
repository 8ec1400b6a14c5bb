#!/usr/bin/env bash
# Container start overhead against a bare task (issue 52), as a user measures it: one master
# and one slave (default flags: secured, fsync on, cgroups and runc when run as root), every
# step a fresh `hetsched` command. On the idle cluster, SAMPLES rounds, each alternating:
#   - bare:  `submit -- first-instruction` (docs/first-instruction.c: reads the clock at its
#            first instruction, before any loader or libc);
#   - warm:  the same program as the entrypoint of an OCI image the slave has unpacked;
#   - cold:  an image of the same program with one file more (a fresh digest each round), so
#            the slave reads, verifies and unpacks it before the start.
# Each figure: the task's first instruction minus the shell's clock read (`$EPOCHREALTIME`)
# just before `submit`; the task's output is found as the new file in the slave's logs.
# Needs root, runc, cc (x86-64) and python3 (which writes the OCI layouts).
# Usage: [KEEP=1] [SAMPLES=N] docs/bench-container.sh [path/to/hetsched]
set -euo pipefail
BIN=$(realpath "${1:-target/release/hetsched}")
DIR=$(mktemp -d)
port() { echo $((20000 + RANDOM % 20000)); }
M=127.0.0.1:$(port); S=127.0.0.1:$(port)
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
cc -O2 -static -nostdlib -fno-stack-protector -o "$DIR/first-instruction" \
  "$(dirname "$0")/first-instruction.c"
mkdir -p "$DIR/images"
# An OCI layout DIR/images/NAME (tag v1): /probe (the program) and /nonce (NAME).
layout() {
  python3 - "$DIR/first-instruction" "$DIR/images/$1" "$1" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile
probe, out, nonce = sys.argv[1:]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as t:
    for name, data, mode in (("probe", open(probe, "rb").read(), 0o755), ("nonce", nonce.encode(), 0o644)):
        i = tarfile.TarInfo(name); i.size = len(data); i.mode = mode
        t.addfile(i, io.BytesIO(data))
raw = buf.getvalue()
layer = gzip.compress(raw, mtime=0)
os.makedirs(f"{out}/blobs/sha256")
def blob(b):
    h = hashlib.sha256(b).hexdigest()
    open(f"{out}/blobs/sha256/{h}", "wb").write(b)
    return {"digest": f"sha256:{h}", "size": len(b)}
cfg = blob(json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Entrypoint": ["/probe"]},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}).encode())
man = blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": dict(cfg, mediaType="application/vnd.oci.image.config.v1+json"),
    "layers": [dict(blob(layer), mediaType="application/vnd.oci.image.layer.v1.tar+gzip")]}).encode())
json.dump({"schemaVersion": 2, "manifests": [dict(man, mediaType="application/vnd.oci.image.manifest.v1+json",
    annotations={"org.opencontainers.image.ref.name": "v1"})]}, open(f"{out}/index.json", "w"))
PY
}
SAMPLES=${SAMPLES:-15}
layout warm
for k in $(seq "$SAMPLES"); do layout "cold$k"; done
"$BIN" certs init "$DIR/ca" >/dev/null
"$BIN" certs issue "$DIR/ca" --role master --name 1 --out "$DIR/cm" >/dev/null
"$BIN" certs issue "$DIR/ca" --role slave --name s1 --out "$DIR/cs" >/dev/null
"$BIN" certs issue "$DIR/ca" --role client --name root --out "$DIR/cc" >/dev/null
"$BIN" master --id 1 --listen "$M" --peers "1=$M" --data-dir "$DIR/m" --certs-dir "$DIR/cm" \
  2>"$DIR/m.log" & PIDS+=($!)
"$BIN" slave --listen "$S" --masters "$M" --data-dir "$DIR/s" --cpus 4 --mem 8192 \
  --certs-dir "$DIR/cs" --image-dir "$DIR/images" 2>"$DIR/s.log" & PIDS+=($!)
export HETSCHED_MASTERS=$M HETSCHED_CERTS_DIR=$DIR/cc HETSCHED_CLIENT_TIMEOUT_MS=30000
for ((i = 0; ; i++)); do
  "$BIN" nodes --json 2>/dev/null | grep -q '"runtime":"runc"' && break
  if [ "$i" -ge 300 ] || ! kill -0 "${PIDS[@]}" 2>/dev/null; then
    echo "the cluster did not come up with runc (a port taken? see $DIR/m.log, $DIR/s.log)" >&2
    KEEP=1; exit 1
  fi
  sleep 0.2
done
sleep 1
. "$(dirname "$0")/bench-idle.sh"
# The warm image unpacked once before the rounds.
idle_once --mem 64 --image "oci:$DIR/images/warm:v1" >/dev/null
sleep 0.5
bare=() warm=() cold=()
for k in $(seq "$SAMPLES"); do
  bare+=("$(idle_once --mem 64 -- "$DIR/first-instruction")"); sleep 0.5
  warm+=("$(idle_once --mem 64 --image "oci:$DIR/images/warm:v1")"); sleep 0.5
  cold+=("$(idle_once --mem 64 --image "oci:$DIR/images/cold$k:v1")"); sleep 0.5
done
report "bare" "${bare[@]}"
report "container, warm" "${warm[@]}"
report "container, cold" "${cold[@]}"
