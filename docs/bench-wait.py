#!/usr/bin/env python3
"""What waiting costs the masters while nothing changes (issue 55's target: 10,000 jobs
waited for cost the leader under 1 % of a core), against a cluster `hetsched up
--no-demo --data-dir DIR` runs, with its `export` lines in the environment.

Usage: docs/bench-wait.py DIR [N]
Submits N never-placeable jobs (pending until cancelled), then measures the CPU of the
cluster's master processes (every one whose command line names DIR) over 10 s each: with
no waits (the baseline), with one event stream waiting for all N (the Python client's
`wait(jobs)`), and with 1,000 long polls (`wait(job)`, one per job) on top. Prints each as
a share of one core; the ratio to the baseline is what waiting costs.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python"))
from hetsched import Client  # noqa: E402

DIR = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10000


def masters():
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cl = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if DIR.encode() in cl and b"\0master\0" in cl:
            out.append(p)
    return out


def cpu(secs):
    ps = masters()

    def ticks():
        t = 0
        for p in ps:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        return t

    a = ticks()
    time.sleep(secs)
    return (ticks() - a) / os.sysconf("SC_CLK_TCK") / secs


c = Client.from_env()
t = time.time()
jobs = [c.submit(["true"], cpus=64, mem=16, allow_unplaceable=True) for _ in range(N)]
print(f"submitted {N} jobs in {time.time() - t:.1f} s", flush=True)
time.sleep(2)
print(f"masters' CPU, {N} pending jobs, no waits: {cpu(10):.2%} of a core", flush=True)
threading.Thread(target=lambda: c.wait(jobs, timeout=600), daemon=True).start()
time.sleep(3)
print(f"... one event stream waiting for all: {cpu(10):.2%} of a core", flush=True)
K = min(N, 1000)
for j in jobs[:K]:
    cc = Client.from_env()
    threading.Thread(target=lambda cc=cc, j=j: cc.wait(j, timeout=600), daemon=True).start()
time.sleep(5)
print(f"... and {K} long polls (one per job): {cpu(10):.2%} of a core", flush=True)
for j in jobs:
    c.cancel(j)
