# Sourced by docs/bench-user.sh and docs/bench-container.sh: one idle submit measured from
# the shell's clock to the task's own clock read, and the report of a series of them.
# The caller sets BIN (the hetsched binary) and DIR (the slave's data in $DIR/s), and has
# the cluster's client environment exported.

# A read with a timeout on a pipe nobody writes: a short wait that starts no process.
mkfifo "$DIR/never" && exec 7<>"$DIR/never"
shopt -s nullglob

# idle_once SUBMIT-ARGS...: one `submit --json --cpus 1 SUBMIT-ARGS`; prints the task's
# start time (the number its output holds, µs since the epoch) minus the shell's clock read
# just before `submit`, in microseconds. Waits up to 20 s for the task's output.
idle_once() {
  local s out f g e i
  local -A before=()
  for g in "$DIR"/s/logs/task-*-1.out; do before[$g]=1; done
  # Nothing but `submit` between the clock read and the task: its output is parsed after
  # (a pipeline's grep/head/cut would start beside it and share the CPUs).
  s=${EPOCHREALTIME//[!0-9]/}
  out=$("$BIN" submit --json --cpus 1 "$@")
  # The task's output is the new file in the slave's logs. Found by looking, with no other
  # process started while the task starts: a `tasks --json` run here to learn the task's id
  # took the two CPUs beside it, ~0.6-1.2 ms at the p50 (BENCHMARKS.md, 2026-11-28).
  f=
  for ((i = 0; i < 1000; i++)); do
    for g in "$DIR"/s/logs/task-*-1.out; do
      [ -z "${before[$g]:-}" ] && [ -s "$g" ] && { f=$g; break 2; }
    done
    read -rt 0.02 -u 7 _ || true
  done
  [ -n "$f" ] || { echo "no task output appeared for $out" >&2; exit 1; }
  e=$(tr -cd 0-9 <"$f")
  echo $((e - s))
}

# report NAME LATENCIES...: the latencies (µs) and their p50 and max in ms.
report() {
  local name=$1; shift
  mapfile -t sorted < <(printf '%s\n' "$@" | sort -n)
  local mid=${sorted[$(( $# / 2 ))]} top=${sorted[$(( $# - 1 ))]}
  echo "$name, us: $*"
  echo "$name: p50 $(( mid / 1000 )).$(( mid % 1000 / 100 )) ms, max $(( top / 1000 )) ms"
}
