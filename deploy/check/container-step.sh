# shellcheck shell=bash
# Check 5 of deploy/check-gpu-host.sh, sourced by it (uses its BIN, OUT, submit_job,
# task_ids and checks.sh's pass/fail): a container task granted one GPU sees exactly its
# device. The cluster's slave trusts $OUT/images (`up --image-dir`).

# The slave's runtime (`runc`, `crun`), or `none: WHY`.
container_runtime() {
  "$BIN" nodes --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
nodes = doc["nodes"] if isinstance(doc, dict) and "nodes" in doc else doc
c = (nodes[0] if nodes else {}).get("containers") or {}
print(c.get("runtime") or "none: " + (c.get("why") or "nodes --json has no containers field"))'
}

# What the task runs in the image: the nvidia device nodes it sees, its CUDA_VISIBLE_DEVICES,
# and `nvidia-smi -L` where the image has the host's nvidia-smi ($1, empty if not).
read -r -d '' CONTAINER_TASK <<'SH'
for d in /dev/nvidia*; do [ -e "$d" ] && echo "node=$d"; done
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
if [ -n "$1" ]; then
  "$1" -L >/tmp/smi.txt 2>&1
  echo "smi-exit=$?"
  while read -r l; do echo "smi: $l"; done </tmp/smi.txt
fi
SH

container_step() {
  local busybox=${GPU_CHECK_BUSYBOX:-/usr/bin/busybox} runtime smi="" files=() libdirs="" job task real=0
  runtime=$(container_runtime) || { fail "nodes --json (containers)"; return; }
  case $runtime in
    none:*) echo "SKIP the container step: the slave runs no containers (${runtime#none: })"; return ;;
  esac
  # A static busybox: "not a dynamic executable" (or, static-pie, "statically linked").
  if [ ! -x "$busybox" ] || ! ldd "$busybox" 2>&1 | grep -q 'not a dynamic\|statically linked'; then
    echo "SKIP the container step: no static busybox at $busybox (Debian's busybox-static; GPU_CHECK_BUSYBOX)"
    return
  fi
  nvidia-smi -L >/dev/null 2>&1 && real=1
  if [ $real = 1 ]; then
    # The host's nvidia-smi and its C libraries go in the image; the driver's libraries
    # (libnvidia-ml among them) are the slave's to bind in, found through LD_LIBRARY_PATH.
    smi=$(command -v nvidia-smi)
    mapfile -t files < <(ldd "$smi" | grep -o '/[^ ]*' | sort -u)
    libdirs=$(ldconfig -p | grep -o '=> /.*libnvidia-ml\.so.*' | sed 's|=> ||; s|/[^/]*$||' | sort -u | paste -sd:)
  fi
  python3 "$(dirname "${BASH_SOURCE[0]}")/oci_image.py" "$OUT/images/gpu" v1 "$busybox" ${smi:+"$smi"} "${files[@]}" ||
    { fail "making the image"; return; }
  echo "image oci:$OUT/images/gpu:v1 (runtime $runtime; $([ $real = 1 ] && echo "with $smi" || echo "emulated GPUs: no device node expected"))"
  local env=()
  [ -n "$libdirs" ] && env=(--env "LD_LIBRARY_PATH=$libdirs")
  job=$(submit_job --gpus 1 --cpus 1 --mem 256 --image "oci:$OUT/images/gpu:v1" \
    "${env[@]}" -- /bin/sh -c "$CONTAINER_TASK" sh "$smi") || { fail "submit (container)"; return; }
  if timeout 180 "$BIN" watch "$job" >"$OUT/watch-5.txt" 2>&1; then pass "the container task succeeded"; else fail "the container task did not succeed (see $OUT/watch-5.txt)"; fi
  task=$(task_ids "$job")
  "$BIN" logs "$task" | tee "$OUT/task-$task.out"
  "$BIN" logs --stderr "$task" >"$OUT/task-$task.err" 2>&1
  if python3 - "$OUT/task-$task.out" "$real" <<'PY'; then pass "the container task sees exactly its device"; else fail "the container task does not see exactly its device (see $OUT/task-$task.out)"; fi
import re, sys
lines = open(sys.argv[1]).read().split("\n")
real = sys.argv[2] == "1"
nodes = sorted(l[5:] for l in lines if l.startswith("node="))
cvd = next((l.split("=", 1)[1] for l in lines if l.startswith("CUDA_VISIBLE_DEVICES=")), None)
ok = cvd is not None and re.fullmatch(r"[0-9]+", cvd) is not None
if not ok:
    print("CUDA_VISIBLE_DEVICES is not one device:", cvd)
gpus = [n for n in nodes if re.fullmatch(r"/dev/nvidia[0-9]+", n)]
if real:
    if gpus != [f"/dev/nvidia{cvd}"]:
        print("GPU device nodes", gpus, "expected only", f"/dev/nvidia{cvd}"); ok = False
    if "/dev/nvidiactl" not in nodes:
        print("no /dev/nvidiactl"); ok = False
    others = set(nodes) - set(gpus) - {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    if others:
        print("unexpected nodes", sorted(others)); ok = False
    smi = [l for l in lines if l.startswith("smi: GPU ")]
    if "smi-exit=0" not in lines or len(smi) != 1:
        print("nvidia-smi -L in the container:", [l for l in lines if l.startswith("smi")]); ok = False
elif nodes:
    print("emulated GPUs, yet nvidia device nodes:", nodes); ok = False
sys.exit(0 if ok else 1)
PY
}
