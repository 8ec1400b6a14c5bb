#!/usr/bin/env python3
"""Time one move of a process into a cgroup, after an idle spell and back to back.

Every task start on a slave with cgroups moves the new child into its attempt's cgroups
before exec. The kernel takes its global cgroup threadgroup lock for writing on every move;
after a quiet spell the first writer waits for an RCU grace period. This probe shows how long
that is on this host (and whether a `favordynmods` mount removes it). Run as root:

    python3 docs/bench-cgroup-move.py [/sys/fs/cgroup/cpu]   # v1 controller dir, or v2 root
"""
import os
import subprocess
import sys
import time

root = sys.argv[1] if len(sys.argv) > 1 else "/sys/fs/cgroup/cpu"
probe = os.path.join(root, "hetsched-move-probe")
os.makedirs(probe, exist_ok=True)


def one_move(idle_s):
    child = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(idle_s)
        start = time.perf_counter()
        with open(os.path.join(probe, "cgroup.procs"), "w") as f:
            f.write(str(child.pid))
        return (time.perf_counter() - start) * 1000
    finally:
        child.kill()
        child.wait()


try:
    for label, idle in (("after 200 ms idle", 0.2), ("back to back", 0.0)):
        runs = sorted(one_move(idle) for _ in range(20))
        print(f"{label}: p50 {runs[10]:.2f} ms, max {runs[-1]:.2f} ms (20 moves)")
finally:
    os.rmdir(probe)
