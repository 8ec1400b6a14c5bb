#!/usr/bin/env bash
# Checks hetsched's real GPU probes on a host with NVIDIA GPUs and a driver, end to end:
#
#   [GPU_CHECK_MASTERS=N] [GPU_CHECK_BUSY_SECONDS=S] \
#     deploy/check-gpu-host.sh [HETSCHED_BINARY] [OUT_DIR]
#
# (GPU_CHECK_MASTERS: the cluster's masters, default 3; GPU_CHECK_BUSY_SECONDS: how long
# the GPU tasks compute, default 8, the half-GPU tasks half of it.)
#
# It starts a secured local cluster (`hetsched up --no-demo --slaves 1`; its one slave asks
# for 2 GPUs), then checks, each line printed PASS or FAIL:
#   1. the slave offers the host's real devices: `nodes --json` says `"probes".gpu = "nvml"`,
#      its GPUs are not emulated and carry the model NVML names (nvidia-smi's);
#   2. a task asking one GPU sees exactly its device (`CUDA_VISIBLE_DEVICES`) and, where
#      PyTorch is installed, computes on it;
#   3. two tasks of half a GPU each share one device at the same time;
#   4. the slave's NVML utilisation probe samples every GPU task's processes, the two sharing
#      a device included (its debug log lines `probe sample` with `gpu_util=Some(..)` and
#      `gpu_probe="nvml"`, not EMULATED);
#   5. a container task asking one GPU (`--gpus 1 --image oci:...`, an image made on the spot
#      from a static busybox by deploy/check/oci_image.py, with the host's nvidia-smi and the
#      C libraries it links against where the host has them) sees exactly its device: the
#      /dev/nvidiaN of its CUDA_VISIBLE_DEVICES and no other (nvidiactl and the UVM nodes
#      besides), and `nvidia-smi -L` in it lists one GPU. On a host without NVIDIA GPUs it
#      checks the emulated case: no nvidia device node at all, CUDA_VISIBLE_DEVICES as granted.
#      Skipped, saying why, where the slave has no OCI runtime (`nodes --json` "containers":
#      runc or crun, as root) or there is no static busybox (GPU_CHECK_BUSYBOX, default
#      /usr/bin/busybox; Debian's busybox-static).
# Logs, the JSON read and the tasks' output are kept under OUT_DIR (default: a temp dir).
# On a host without NVIDIA GPUs check 1 and check 4 fail and the rest pass (the slave offers
# emulated devices; tests/gpu_host_check.rs runs it so). Exit status: 0 every check passed,
# 1 a check failed, 2 bad usage or no usable binary.
#
# Then the S0 part (deploy/check-gpu-host-s0.sh: engine choice and forwarding with the
# shipped gemm plug-in, makespan ratio against them off, results checked against the CPU
# kernel), unless GPU_CHECK_S0=0. `deploy/check-gpu-host.sh --s0 [BINARY] [OUT_DIR]` runs
# the S0 part alone.
set -uo pipefail

if [ "${1:-}" = --s0 ]; then
  shift
  exec "$(dirname "${BASH_SOURCE[0]}")/check-gpu-host-s0.sh" "$@"
fi

BIN=${1:-hetsched}
OUT=${2:-$(mktemp -d /tmp/hetsched-gpu-check.XXXXXX)}
if ! command -v "$BIN" >/dev/null 2>&1 && [ ! -x "$BIN" ]; then
  echo "check-gpu-host: no hetsched binary at '$BIN'" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
BIN=$(command -v "$BIN" || echo "$BIN")
# shellcheck source=deploy/check/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/check/checks.sh"

echo "== host"
nvidia-smi -L 2>&1 | tee "$OUT/nvidia-smi-L.txt" || echo "(nvidia-smi failed)"
EXPECTED_MODEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

echo "== cluster"
DATA="$OUT/cluster"
# The slave trusts the directory of check 5's image (it must exist when the slave starts).
mkdir -p "$OUT/images" || exit 2
# The slave's probe samples are debug lines; everything else at info.
export HETSCHED_LOG=${HETSCHED_LOG:-info,hetsched_slave::probe=debug}
"$BIN" up --no-demo --masters "${GPU_CHECK_MASTERS:-3}" --slaves 1 --data-dir "$DATA" \
  --image-dir "$OUT/images" >"$OUT/up.out" 2>"$OUT/up.err" &
UP=$!
trap 'kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null' EXIT
if ! wait_for 60 grep -q '^export HETSCHED_TOKEN' "$OUT/up.out"; then
  fail "the cluster did not come up in 60 s (see $OUT/up.err)"
  exit 1
fi
eval "$(grep '^export ' "$OUT/up.out")"
cat "$OUT/up.out"

echo "== 1. the slave offers the real devices"
has_node() { "$BIN" nodes --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin) else 1)'; }
wait_for 60 has_node || fail "no slave registered in 60 s (see $DATA/slave-1.log)"
"$BIN" nodes --json >"$OUT/nodes.json" || fail "nodes --json"
python3 - "$OUT/nodes.json" "$EXPECTED_MODEL" <<'PY' && pass "real GPUs offered through NVML" || fail "real GPUs offered through NVML"
import json, sys
text = open(sys.argv[1]).read().strip()
doc = json.loads(text)
nodes = doc["nodes"] if isinstance(doc, dict) and "nodes" in doc else doc
gpu_nodes = [n for n in nodes if n.get("capacity", {}).get("gpus")]
print("nodes with GPUs:", len(gpu_nodes))
ok = bool(gpu_nodes)
for n in gpu_nodes:
    devs = n["capacity"]["gpus"]
    print(" ", n.get("name"), "probes", n.get("probes"), "gpus_emulated", n.get("gpus_emulated"),
          "devices", [(d.get("model"), d.get("emulated")) for d in devs])
    ok &= n.get("probes", {}).get("gpu") == "nvml"
    ok &= not n.get("gpus_emulated", False)
    ok &= all(not d.get("emulated") for d in devs)
    if sys.argv[2]:
        ok &= all(d.get("model") == sys.argv[2] for d in devs)
sys.exit(0 if ok else 1)
PY

# A GPU task: what it sees, and (with PyTorch) about 8 s of matrix products on its device.
read -r -d '' GPU_TASK <<'PY'
import os, sys, time
print("start=%.3f" % time.time())
print("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
print("HETSCHED_GPUS=" + os.environ.get("HETSCHED_GPUS", "<unset>"))
try:
    import torch
    cuda = torch.cuda.is_available()
except ImportError:
    torch, cuda = None, False
if not cuda:
    print("torch: not installed" if torch is None else "torch: no CUDA device")
    time.sleep(float(sys.argv[1]))
    print("end=%.3f" % time.time()); sys.exit(0)
print("torch devices:", torch.cuda.device_count(), torch.cuda.get_device_name(0))
a = torch.randn(8192, 8192, device="cuda")
n, t = 0, time.time()
while time.time() - t < float(sys.argv[1]):
    b = a @ a; n += 1
    torch.cuda.synchronize()
print("matmuls:", n)
print("end=%.3f" % time.time())
PY

submit_job() { "$BIN" submit --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])'; }
task_ids() {
  "$BIN" tasks --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
tasks = doc["tasks"] if isinstance(doc, dict) else doc
print(" ".join(str(t["id"]) for t in tasks if str(t["job_id"]) == sys.argv[1]))' "$1"
}

echo "== 2. one GPU task"
BUSY=${GPU_CHECK_BUSY_SECONDS:-8}
JOB=$(submit_job --gpus 1 --cpus 1 --mem 512 -- python3 -c "$GPU_TASK" "$BUSY") || fail "submit"
echo "job $JOB"
if timeout 180 "$BIN" watch "$JOB" >"$OUT/watch-1.txt" 2>&1; then pass "the GPU task succeeded"; else fail "the GPU task did not succeed (see $OUT/watch-1.txt)"; fi
TASK=$(task_ids "$JOB")
"$BIN" logs "$TASK" | tee "$OUT/task-$TASK.out"
"$BIN" logs --stderr "$TASK" >"$OUT/task-$TASK.err" 2>&1
if grep -qx 'CUDA_VISIBLE_DEVICES=0' "$OUT/task-$TASK.out"; then pass "the task sees device 0 alone"; else fail "CUDA_VISIBLE_DEVICES"; fi
if grep -q '^torch: ' "$OUT/task-$TASK.out"; then
  echo "SKIP computing on the device: $(grep -m1 '^torch: ' "$OUT/task-$TASK.out")"
elif grep -q '^matmuls: [1-9]' "$OUT/task-$TASK.out"; then pass "the task computed on its GPU"; else fail "the task did not compute on its GPU (see $OUT/task-$TASK.err)"; fi

echo "== 3. two half-GPU tasks share a device"
JOB2=$(submit_job --gpus 0.5 --count 2 --cpus 1 --mem 512 -- python3 -c "$GPU_TASK" "$(python3 -c "print($BUSY / 2)")") || fail "submit"
if timeout 180 "$BIN" watch "$JOB2" >"$OUT/watch-2.txt" 2>&1; then pass "both half-GPU tasks succeeded"; else fail "half-GPU tasks (see $OUT/watch-2.txt)"; fi
for T in $(task_ids "$JOB2"); do "$BIN" logs "$T" >"$OUT/task-$T.out"; done
python3 - "$OUT" $(task_ids "$JOB2") <<'PY' && pass "the two half-GPU tasks overlapped in time" || fail "the half-GPU tasks did not overlap"
import re, sys
spans = []
for t in sys.argv[2:]:
    text = open(f"{sys.argv[1]}/task-{t}.out").read()
    print(f"task {t}:", " ".join(text.split()))
    s, e = re.search(r"start=([0-9.]+)", text), re.search(r"end=([0-9.]+)", text)
    if s and e:
        spans.append((float(s.group(1)), float(e.group(1))))
sys.exit(0 if len(spans) == 2 and max(s for s, _ in spans) < min(e for _, e in spans) else 1)
PY

echo "== 4. the NVML utilisation probe"
grep -h 'probe sample' "$DATA"/*/*.log "$DATA"/*.log 2>/dev/null | grep 'gpu_util' >"$OUT/probe-samples.txt"
grep -c . "$OUT/probe-samples.txt" | sed 's/^/probe sample lines: /'
tail -n 3 "$OUT/probe-samples.txt"
# Every GPU task computed for seconds: each must have at least one NVML reading, the
# half-GPU tasks included (they share device 0 and are sampled one after the other).
for T in $TASK $(task_ids "$JOB2"); do
  if grep "task=task-$T " "$OUT/probe-samples.txt" | grep 'gpu_util=Some' | grep -v EMULATED | grep -q 'gpu_probe="nvml"'; then
    pass "NVML sampled task $T's GPU utilisation: $(grep "task=task-$T " "$OUT/probe-samples.txt" | grep -o 'gpu_util=Some([0-9.]*)' | tr '\n' ' ')"
  else
    fail "no NVML utilisation sample of task $T"
  fi
done

echo "== 5. a container task sees exactly its device"
# shellcheck source=deploy/check/container-step.sh
source "$(dirname "${BASH_SOURCE[0]}")/check/container-step.sh"
container_step

if [ "${GPU_CHECK_S0:-1}" != 0 ]; then
  kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null
  "$(dirname "${BASH_SOURCE[0]}")/check-gpu-host-s0.sh" "$BIN" "$OUT/s0" || FAILED=1
fi

echo "== result: $([ $FAILED = 0 ] && echo 'every check passed' || echo 'a check FAILED') (files in $OUT)"
exit $FAILED
