#!/usr/bin/env bash
# The FGD measures (GPU share allocated at the end, unallocated share at the first failure)
# of several placements on the traces whose pods name GPU models, arrival-only on all nodes,
# in trace order and shuffled: the published gpuspec10/20/25 and `sim gen-trace --kind
# gpuspec` variants (LEVELS × SEEDS), plus the published variants where no pod names a model.
# Prints one markdown row per (trace, order, policy) and, per (trace, order), whether the
# first policy (the one judged) is at least the last (the baseline) by both measures.
#   docs/sim/gpuspec-matrix.sh     BIN=target/release/hetsched T=../shared/traces
#                                  POLICIES=auto,frag,best-fit LEVELS="10 30 50" SEEDS="1 2 3"
#                                  ORDERS="trace shuffle" PUBLISHED="gpuspec10 gpuspec20 ..."
#                                  EVERY=N (a node subset: every Nth node of the list)
# Runs one simulation at a time (a frag run over the 1,523 nodes and 8,152 pods takes a few
# seconds in a release build, minutes in a debug one).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/hetsched}
T=${T:-../shared/traces}
POLICIES=${POLICIES:-auto,frag,best-fit}
LEVELS=${LEVELS:-10 30 50}
SEEDS=${SEEDS:-1 2 3}
ORDERS=${ORDERS:-trace shuffle}
PUBLISHED=${PUBLISHED:-gpuspec10 gpuspec20 gpuspec25 default multigpu20 gpushare60 cpu100}
GEN=${GEN:-$(mktemp -d)}
NODES=$T/openb_node_list_all_node.csv
if [ -n "${EVERY:-}" ]; then
  # The subset BENCHMARKS.md's queueing runs use: the header and every EVERY-th node.
  awk -v n="$EVERY" 'NR == 1 || NR % n == 2' "$NODES" > "$GEN/nodes-every$EVERY.csv"
  NODES=$GEN/nodes-every$EVERY.csv
fi

traces=()
for p in $PUBLISHED; do traces+=("$p=$T/openb_pod_list_$p.csv"); done
for l in $LEVELS; do
  for s in $SEEDS; do
    f=$GEN/gpuspec-l$l-s$s${EVERY:+-every$EVERY}.csv
    [ -s "$f" ] || "$BIN" sim gen-trace --kind gpuspec --level "$l" --seed "$s" \
      --trace-pods "$T/openb_pod_list_default.csv" --trace-nodes "$NODES" --out "$f"
    traces+=("gen-gpuspec$l-s$s=$f")
  done
done

# One row per run; a verdict line per (trace, order): the first policy against the last.
REPORT=$(cat <<'PY'
import json, os, sys
runs = json.loads(sys.stdin.read())["runs"]
name, order = os.environ["NAME"], os.environ["ORDER"]
def f(x): return "-" if x is None else f"{x:.4f}"
for r in runs:
    print(f"| {name} | {order} | {r['policy']} | {r['placed']} | {r['first_failure_index']} "
          f"| {f(r['unallocated_gpu_share_at_first_failure'])} "
          f"| {f(r['gpu_allocated_share_at_end'])} | {r['sim_ms']} |")
a, b = runs[0], runs[-1]
ua, ub = a["unallocated_gpu_share_at_first_failure"], b["unallocated_gpu_share_at_first_failure"]
ea, eb = a["gpu_allocated_share_at_end"], b["gpu_allocated_share_at_end"]
end_ok = ea >= eb - 1e-9
ff_ok = ua is None or (ub is not None and ua <= ub + 1e-9)
with open(os.environ["VERDICTS"], "a") as out:
    print(f"{name} {order}: {a['policy']} vs {b['policy']}: allocated at end {ea:.4f} vs "
          f"{eb:.4f}, unallocated at first failure {f(ua)} vs {f(ub)}: "
          + ("ok" if end_ok and ff_ok else "WORSE"), file=out)
PY
)
VERDICTS=$(mktemp)
echo "| trace | order | policy | placed | first failure | unallocated then | allocated at end | sim_ms |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for t in "${traces[@]}"; do
  name=${t%%=*}; file=${t#*=}
  for o in $ORDERS; do
    # Trace order: creation order where the list has times, file order otherwise.
    args=()
    if [ "$o" = shuffle ]; then
      seed=1
      case $name in *-s*) seed=${name##*-s} ;; esac
      args=(--order shuffle --seed "$seed")
    fi
    "$BIN" sim --trace-nodes "$NODES" --trace-pods "$file" --mode arrival-only \
      --compare "$POLICIES" --json "${args[@]}" 2>/dev/null | tail -n 1 |
      NAME=$name ORDER=$o VERDICTS=$VERDICTS python3 -c "$REPORT"
  done
done
echo
cat "$VERDICTS"
rm -f "$VERDICTS"
