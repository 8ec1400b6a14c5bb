# Helpers of the check scripts (deploy/check-gpu-host.sh, deploy/check-gpu-host-s0.sh),
# sourced: PASS/FAIL lines (FAIL sets FAILED=1) and polling with a deadline.
FAILED=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=1; }
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds or time runs out.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
