#!/usr/bin/env bash
# The S0 part of deploy/check-gpu-host.sh: does engine choice and forwarding pay on this host,
# with the shipped gemm plug-in (deploy/plugins/gemm: CuPy on a GPU, else NumPy)?
#
#   deploy/check-gpu-host.sh --s0 [HETSCHED_BINARY] [OUT_DIR]
#   (or deploy/check-gpu-host-s0.sh [HETSCHED_BINARY] [OUT_DIR])
#
# Env: S0_GEMM_N (gemm size, default 384), S0_PROGRAMS (programs in the mix, default 8),
# S0_PROFILE_BUDGET (default 6s).
#
# Two insecure clusters on loopback, one after the other, each of one master and two slaves:
# `gpu-node` (`--gpus 1`, a gpu engine whose gemm is the plug-in in server mode) and
# `cpu-node` (CPU only). The same mix — gemm-heavy programs and sort/sha256 programs,
# submitted together — runs with the defaults (profiles, engine choice, forwarding) and with
# them off (`--no-profile --no-forward`, as tests/engine_mix_bench.rs). Then a third, short
# cluster checks the plug-in's results against the CPU kernel (`slave --check-results`:
# gemm by relative Frobenius error <= 1e-4, sort and sha256 byte for byte).
# Prints PASS/FAIL lines and one line `S0 makespan ratio off/on = R ...`, labelled
# `emulated` when the host's GPU is emulated (no NVIDIA GPU: the plug-in runs on NumPy on
# the CPU, the "gpu" engine is a label). Exit status: 0 every check passed, 1 a check
# failed, 2 bad usage or no usable binary or plug-in.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${1:-hetsched}
OUT=${2:-$(mktemp -d /tmp/hetsched-s0-check.XXXXXX)}
if ! command -v "$BIN" >/dev/null 2>&1 && [ ! -x "$BIN" ]; then
  echo "check-gpu-host --s0: no hetsched binary at '$BIN'" >&2
  exit 2
fi
BIN=$(command -v "$BIN" || echo "$BIN")
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
PLUGIN=$HERE/plugins/gemm
mkdir -p "$OUT" || exit 2
BACKEND=$("$PLUGIN" --backend 2>"$OUT/plugin.err") || {
  echo "check-gpu-host --s0: the gemm plug-in cannot run: $(cat "$OUT/plugin.err")" >&2
  exit 2
}
N=${S0_GEMM_N:-384}
PROGRAMS=${S0_PROGRAMS:-8}
BUDGET=${S0_PROFILE_BUDGET:-6s}
# shellcheck source=deploy/check/checks.sh
source "$HERE/check/checks.sh"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
trap stop_all EXIT
echo "== S0: gemm plug-in backend $BACKEND; binary $BIN; files in $OUT"

# The mix's programs.
{
  for i in 1 2 3; do printf '[[call]]\napi = "gemm"\nargs = { n = %s, seed = %s }\n\n' "$N" "$i"; done
} >"$OUT/gemm.toml"
printf '[[call]]\napi = "sort"\nargs = { items = 200000, seed = 1 }\n\n[[call]]\napi = "sha256"\nargs = { bytes = 2000000, seed = 2 }\n' >"$OUT/sort.toml"
{
  printf '[[call]]\napi = "gemm"\nargs = { n = 64, seed = 7 }\n\n'
  printf '[[call]]\napi = "gemm"\nargs = { n = %s, seed = 8 }\n\n' "$N"
  printf '[[call]]\napi = "sort"\nargs = { items = 50000, seed = 9 }\n'
} >"$OUT/verify.toml"

# start_cluster NAME SLAVE_FLAGS...: a master and the two slaves; sets M (its address).
start_cluster() {
  local name=$1 dir="$OUT/$1"
  shift
  mkdir -p "$dir"
  local mp
  mp=$(free_port)
  M=127.0.0.1:$mp
  "$BIN" master --insecure --id 1 --listen "$M" --peers "1=$M" --data-dir "$dir/master" >"$dir/master.log" 2>&1 &
  PIDS+=($!)
  printf '[[engine]]\nkind = "gpu"\nemulated = %s\n[[plugin]]\napi = "gemm"\nengine = "gpu"\nexec = "%s"\nmode = "server"\n' \
    "$EMULATED_TOML" "$PLUGIN" >"$dir/engines-gpu.toml"
  "$BIN" slave --insecure --listen "127.0.0.1:$(free_port)" --masters "$M" --data-dir "$dir/gpu-node" \
    --name gpu-node --cpus 2 --mem 4096 --gpus 1 --engines "$dir/engines-gpu.toml" \
    --profile-budget "$BUDGET" "$@" >"$dir/gpu-node.log" 2>&1 &
  PIDS+=($!)
  "$BIN" slave --insecure --listen "127.0.0.1:$(free_port)" --masters "$M" --data-dir "$dir/cpu-node" \
    --name cpu-node --cpus 2 --mem 4096 --profile-budget "$BUDGET" "$@" >"$dir/cpu-node.log" 2>&1 &
  PIDS+=($!)
  nodes_up() { [ "$("$BIN" --masters "$M" nodes --json | python3 -c 'import json,sys; print(sum(n["state"]=="up" for n in json.load(sys.stdin)))')" = 2 ]; }
  wait_for 90 nodes_up || { fail "$name: the two slaves did not come up in 90 s (see $dir)"; return 1; }
}
profiles_in() { [ "$("$BIN" --masters "$M" profiles --json | python3 -c 'import json,sys; print(sum(bool(n["table"]["rows"]) for n in json.load(sys.stdin)["nodes"]))')" = 2 ]; }

# run_mix NAME: submits the mix at once, waits for it, writes NAME/calls.json; prints the makespan, s.
run_mix() {
  local dir="$OUT/$1" jobs=() t0 t1
  t0=$(date +%s.%N)
  for i in $(seq 0 $((PROGRAMS - 1))); do
    local prog=$OUT/gemm.toml
    [ $((i % 4)) = 3 ] && prog=$OUT/sort.toml
    jobs+=("$("$BIN" --masters "$M" submit --json --cpus 1 --program "$prog" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')")
  done
  all_done() {
    "$BIN" --masters "$M" tasks --json | python3 -c '
import json, sys
want = set(sys.argv[1:])
tasks = [t for t in json.load(sys.stdin) if str(t["job_id"]) in want]
bad = [t for t in tasks if t["state"] in ("failed", "cancelled")]
if bad: print("FAILED TASKS", bad, file=sys.stderr); sys.exit(2)
sys.exit(0 if len(tasks) == len(want) and all(t["state"] == "succeeded" for t in tasks) else 1)' "${jobs[@]}"
  }
  wait_for 240 all_done || { fail "$1: the mix did not finish in 240 s (see $dir)"; return 1; }
  t1=$(date +%s.%N)
  "$BIN" --masters "$M" tasks --json | python3 -c 'import json,sys; print(" ".join(str(t["id"]) for t in json.load(sys.stdin) if str(t["job_id"]) in sys.argv[1:]))' "${jobs[@]}" >"$dir/tasks.txt"
  echo "[" >"$dir/calls.json"
  local first=1
  for t in $(cat "$dir/tasks.txt"); do
    [ $first = 1 ] || echo "," >>"$dir/calls.json"
    first=0
    "$BIN" --masters "$M" calls --json "task-$t" >>"$dir/calls.json"
  done
  echo "]" >>"$dir/calls.json"
  python3 -c "print('%.3f' % ($t1 - $t0))"
}

if nvidia-smi -L >/dev/null 2>&1; then EMULATED_TOML=false; LABEL=""; else EMULATED_TOML=true; LABEL=" [emulated: no NVIDIA GPU; the plug-in runs on $BACKEND on the CPU]"; fi

echo "== S0 1. defaults: profiles, engine choice, forwarding"
ON=""
if start_cluster on; then
  if wait_for 120 profiles_in; then pass "both slaves profiled"; else fail "profiles did not arrive in 120 s"; fi
  sleep 3 # the forwarders fetch their peers' tables every 2 s
  "$BIN" --masters "$M" profiles --json >"$OUT/on/profiles.json"
  ON=$(run_mix on)
fi
stop_all
echo "== S0 2. engine choice and forwarding off (--no-profile --no-forward)"
OFF=""
if start_cluster off --no-profile --no-forward; then OFF=$(run_mix off); fi
stop_all
echo "== S0 3. the plug-in's results against the CPU kernel (--check-results)"
if start_cluster verify --no-profile --check-results; then
  V=$("$BIN" --masters "$M" submit --json --cpus 1 --nodes gpu-node --program "$OUT/verify.toml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
  if timeout 120 "$BIN" --masters "$M" watch "$V" >"$OUT/verify/watch.txt" 2>&1; then
    VT=$("$BIN" --masters "$M" tasks --json | python3 -c 'import json,sys; print([t["id"] for t in json.load(sys.stdin) if str(t["job_id"]) == sys.argv[1]][0])' "$V")
    "$BIN" --masters "$M" calls --json "task-$VT" >"$OUT/verify/calls.json"
  else
    fail "the verification program did not succeed (see $OUT/verify)"
  fi
fi
stop_all

S0_GEMM_N=$N python3 - "$OUT" "$ON" "$OFF" "$LABEL" <<'PY'
import json, os, sys
out, on, off, label = sys.argv[1:5]
failed = False
def check(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed |= not ok
def calls(name):
    path = os.path.join(out, name, "calls.json")
    if not os.path.exists(path):
        return []
    return [c for doc in json.load(open(path)) for c in doc["calls"]]
runs = {"on": calls("on"), "off": calls("off")}
for name, cs in runs.items():
    by = {}
    for c in cs:
        by[c["engine"]] = by.get(c["engine"], 0) + 1
    fwd = [c for c in cs if c["forwarded"]]
    moved = sum((c.get("transfer") or {}).get("arg_bytes", 0) + (c.get("transfer") or {}).get("result_bytes", 0) for c in fwd)
    fb = [c for c in cs if c.get("fallback_from")]
    print(f"  {name}: {len(cs)} calls, per engine {by}, forwarded {len(fwd)} ({moved} B moved), fallbacks {len(fb)}")
    check(not fb, f"{name}: no call fell back to the CPU" + (f" ({fb[0].get('error')})" if fb else ""))
# Engine choice: gemm goes to the gpu engine where gpu-node's profile ranks it first at
# this size (a GPU, or NumPy against a slow kernel); where the CPU kernel is faster (a release
# build against NumPy on reference BLAS) the CPU is right.
n = int(os.environ.get("S0_GEMM_N", "384"))
bucket = (12 * n * n - 1).bit_length()
try:
    prof = json.load(open(os.path.join(out, "on", "profiles.json")))
    rows = [r for p in prof["nodes"] if p["name"] == "gpu-node" for r in p["table"]["rows"] if r["api"] == "gemm"]
    row = min(rows, key=lambda r: (abs(r["bucket"] - bucket), -r["bucket"]))
    times = {e["engine"]: e["time_us"] for e in row["ranked"]}
except (OSError, ValueError, KeyError):
    times = {}
best = min(times, key=times.get) if times else None
on_gpu = sum(c["api"] == "gemm" and c["engine"] == "gpu" for c in runs["on"])
gemms = sum(c["api"] == "gemm" for c in runs["on"])
print(f"  gpu-node's profile for gemm n={n}: " + ", ".join(f"{k} {v / 1000:.2f} ms" for k, v in sorted(times.items(), key=lambda kv: kv[1])))
if best == "gpu":
    check(on_gpu > 0, f"on: the profile ranks the gpu engine first for gemm and {on_gpu} of {gemms} gemm calls ran there")
else:
    check(best is not None, f"on: the profile ranks {best} first for gemm n={n} (the plug-in is slower here); {on_gpu} of {gemms} gemm calls ran on the gpu engine")
# Exact results agree wherever they ran; gemm from the CPU kernel too.
seen, differ = {}, 0
for cs in runs.values():
    for c in cs:
        if c["api"] == "gemm" and c["engine"] == "gpu":
            continue
        key = (c["api"], c["scale_bytes"], c["index"])
        differ += key in seen and seen[key] != c["digest"]
        seen.setdefault(key, c["digest"])
check(seen and not differ, f"digests of exact results agree across the runs ({len(seen)} kinds of call)")
vpath = os.path.join(out, "verify", "calls.json")
v = json.load(open(vpath))["calls"] if os.path.exists(vpath) else []
checked = [c for c in v if c.get("check")]
worst = max((c["check"]["rel_err"] for c in checked if c["check"]["kind"] == "tolerance"), default=None)
check(any(c["engine"] == "gpu" for c in checked) and all(c["check"]["ok"] for c in checked),
      f"plug-in results within tolerance of the CPU kernel ({len(checked)} checked, worst gemm rel_err {worst})")
if on and off:
    print(f"S0 makespan ratio off/on = {float(off) / float(on):.2f} (off {float(off):.2f} s, on {float(on):.2f} s){label}")
else:
    check(False, "both runs finished (no ratio)")
sys.exit(1 if failed else 0)
PY
[ $? = 0 ] || FAILED=1
echo "== S0 result: $([ $FAILED = 0 ] && echo 'every check passed' || echo 'a check FAILED') (files in $OUT)"
exit $FAILED
