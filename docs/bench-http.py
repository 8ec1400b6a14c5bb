#!/usr/bin/env python3
"""Latency of the HTTP API against a running cluster (BENCHMARKS.md#http-api).

Usage: docs/bench-http.py LEADER_HTTP FOLLOWER_HTTP [N]
Submits N one-task jobs (`true`, 0.1 CPU) sequentially over one keep-alive connection to
each address, reads /v1/status both ways, and prints percentiles in ms.
"""
import http.client, json, sys, time

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

def run(addr, method, path, body, n):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        lat.append((time.perf_counter() - t) * 1000)
        assert r.status in (200, 201), r.status
    return lat

leader, follower = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
spec = json.dumps({"name": "bench", "command": ["true"], "resources": {"cpus": 0.1, "mem": 16}})
for label, addr, method, path, body in [
    ("POST /v1/jobs at the leader", leader, "POST", "/v1/jobs", spec),
    ("POST /v1/jobs at a follower (forwarded)", follower, "POST", "/v1/jobs", spec),
    ("GET /v1/status (linearizable) at the leader", leader, "GET", "/v1/status", None),
    ("GET /v1/status (linearizable) at a follower", follower, "GET", "/v1/status", None),
    ("GET /v1/status?stale=true at a follower", follower, "GET", "/v1/status?stale=true", None),
]:
    lat = run(addr, method, path, body, n)
    print(f"{label:46s} n={n}  p50 {pct(lat, 50):6.2f} ms  p99 {pct(lat, 99):6.2f} ms  max {max(lat):6.2f} ms")
