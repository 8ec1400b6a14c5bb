"""The Python client against a real cluster (`hetsched up --no-demo`, conftest.py): submit,
wait, logs, cancel, explain, flows, idempotent retries, events, and the errors (401, 403,
404, 400 with the field) as the exceptions that mirror the CLI's exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from typing import Dict, List

import pytest

import hetsched
from hetsched import BadInput, Client, Gone, NotFound, NotSupported, PermissionDenied

from conftest import Cluster, binary


def test_version_is_the_binarys() -> None:
    out = subprocess.run([binary(), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == hetsched.__version__


def test_submit_wait_logs(cluster: Cluster) -> None:
    c = cluster.client()
    job = c.submit(["sh", "-c", "echo hello $HETSCHED_TASK_INDEX"], cpus=0.5, mem=64, count=2, name="py-hello")
    assert job.tasks == 2
    done = c.wait(job, timeout=60)
    assert done.done and done.succeeded, done
    assert done.name == "py-hello"
    tasks = sorted(c.tasks(job), key=lambda t: t.index)
    assert [t.state for t in tasks] == ["succeeded", "succeeded"]
    assert c.logs(tasks[1].id) == "hello 1\n"
    followed = "".join(c.logs(tasks[0].id, follow=True))
    assert followed == "hello 0\n"


def test_cancel_and_explain(cluster: Cluster) -> None:
    c = cluster.client()
    job = c.submit(["sleep", "600"], cpus=0.1, mem=16, name="py-sleeper")
    task = c.tasks(job)[0]
    why = c.explain(task.id)
    assert why["task"] == task.id and "state" in why
    assert c.cancel(job) == 1
    assert c.wait(job, timeout=30).state == "cancelled"


def test_a_timeout_answers_the_job_as_it_is(cluster: Cluster) -> None:
    c = cluster.client()
    job = c.submit(["sleep", "600"], cpus=0.1, mem=16)
    started = time.monotonic()
    j = c.wait(job, timeout=1.0)
    assert not j.done and 0.9 <= time.monotonic() - started < 10
    c.cancel(job)


def test_the_same_key_gives_the_first_job(cluster: Cluster) -> None:
    c = cluster.client()
    a = c.submit(["true"], cpus=0.1, mem=16, idempotency_key="py-sweep-1")
    b = c.submit(["true"], cpus=0.1, mem=16, idempotency_key="py-sweep-1")
    assert a == b
    assert c.submit(["true"], cpus=0.1, mem=16, idempotency_key="py-sweep-2") != a
    steps = [{"name": "one", "command": ["true"]}]
    f = c.submit_flow(steps, idempotency_key="py-flow-1")
    assert c.submit_flow(steps, idempotency_key="py-flow-1") == f
    with pytest.raises(BadInput) as e:
        c.submit(["true"], idempotency_key="x" * 65)
    assert e.value.field == "Idempotency-Key" and e.value.exit_code == 2


def test_a_sweep_with_dependencies(cluster: Cluster) -> None:
    c = cluster.client()
    prep = c.submit(["true"], cpus=0.1, mem=16, name="prep")
    runs = [c.submit(["sh", "-c", f"echo {i * i}"], cpus=0.1, mem=16, after=[prep]) for i in range(8)]
    done = c.wait(runs, timeout=120)
    assert all(j.succeeded for j in done), done
    results = [int(c.logs(c.tasks(j)[0].id)) for j in runs]
    assert results == [i * i for i in range(8)]


def test_waiting_for_many_jobs_is_one_stream(cluster: Cluster) -> None:
    c = cluster.client()
    jobs = [c.submit(["sleep", "1"], cpus=0.05, mem=8) for _ in range(30)]
    before = requests_by_route(cluster)
    done = c.wait(jobs, timeout=120)
    after = requests_by_route(cluster)
    assert all(j.succeeded for j in done), done
    assert delta(before, after, "/v1/events") == 1, (before, after)
    assert delta(before, after, "/v1/jobs/{id}/wait") == 0
    # The states: one listing when the stream opened, one at the end.
    assert delta(before, after, "/v1/jobs") == 2


def test_waiting_for_a_thousand_idle_jobs_is_one_stream_and_costs_the_masters_nothing(
    cluster: Cluster,
) -> None:
    c = cluster.client()
    # Never placeable (nodes may join later): pending until cancelled.
    jobs = [c.submit(["true"], cpus=64, mem=16, allow_unplaceable=True) for _ in range(1000)]
    idle = masters_cpu_seconds(cluster, 3.0)
    before = requests_by_route(cluster)
    done: List[List[hetsched.Job]] = []
    waiter = threading.Thread(target=lambda: done.append(c.wait(jobs, timeout=300)))
    waiter.start()
    time.sleep(1.0)
    waiting = masters_cpu_seconds(cluster, 3.0)
    print(f"masters' CPU while 1,000 jobs wait: {waiting / 3.0:.2%} of a core (idle {idle / 3.0:.2%})")
    assert waiting / 3.0 <= idle / 3.0 + 0.02, (idle, waiting)
    assert delta(before, requests_by_route(cluster), "/v1/events") == 1
    for j in jobs:
        c.cancel(j)
    waiter.join(timeout=300)
    assert done and all(j.state == "cancelled" for j in done[0])
    after = requests_by_route(cluster)
    assert delta(before, after, "/v1/events") == 1
    assert delta(before, after, "/v1/jobs/{id}/wait") == 0
    assert delta(before, after, "/v1/jobs") == 2


def masters_cpu_seconds(cluster: Cluster, seconds: float) -> float:
    """CPU seconds the cluster's master processes spent over `seconds`."""
    pids = [
        p for p in os.listdir("/proc")
        if p.isdigit() and b"master" in _cmdline(p) and cluster.data.encode() in _cmdline(p)
    ]
    def total() -> int:
        ticks = 0
        for p in pids:
            try:
                fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return ticks
    start = total()
    time.sleep(seconds)
    return (total() - start) / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: str) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_events_resume_from_a_seq_and_a_lost_one_is_gone(cluster: Cluster) -> None:
    c = cluster.client()
    job = c.submit(["true"], cpus=0.1, mem=16)
    c.wait(job, timeout=60)
    seen: List[hetsched.Event] = []
    for e in c.events(since=0):
        if e.job == job.id:
            seen.append(e)
        if e.kind == "job" and e.job == job.id and e.state == "succeeded":
            break
    assert [e.seq for e in seen] == sorted(e.seq for e in seen)
    assert {e.kind for e in seen} == {"job", "task"}
    # After the last seen, nothing of this job comes again: resume where it stopped.
    it = c.events(since=seen[-1].seq)
    other = c.submit(["true"], cpus=0.1, mem=16)
    first = next(it)
    assert first.seq > seen[-1].seq and first.job == other.id


def test_errors_mirror_the_exit_codes(cluster: Cluster) -> None:
    c = cluster.client()
    with pytest.raises(NotFound) as nf:
        c.job(999999)
    assert nf.value.status == 404 and nf.value.exit_code == 4
    with pytest.raises(BadInput) as bad:
        c.submit(["true"], cpus="lots")  # type: ignore[arg-type]
    assert bad.value.status == 400 and bad.value.field == "resources.cpus"
    anonymous = Client(cluster.exports["HETSCHED_API"], ca=ca_of(cluster))
    with pytest.raises(PermissionDenied) as unauth:
        anonymous.jobs()
    assert unauth.value.status == 401 and unauth.value.exit_code == 3
    made = cluster.cli("acl", "token", "create", "--user", "pyuser", "--json")
    assert made.returncode == 0, made.stderr
    token = re.search(r'"token":\s*"([^"]+)"', made.stdout)
    assert token
    user = Client(cluster.exports["HETSCHED_API"], token=token.group(1), ca=ca_of(cluster))
    root_job = c.submit(["true"], cpus=0.1, mem=16)
    with pytest.raises(PermissionDenied) as denied:
        user.cancel(root_job)
    assert denied.value.status == 403
    mine = user.submit(["true"], cpus=0.1, mem=16)
    assert user.wait(mine, timeout=60).user == "pyuser"
    # Accounting: the user's ended attempt is on record, and a user reads only its own.
    records = user.history(job=mine)
    assert [r["user"] for r in records] == ["pyuser"], records
    assert records[0]["state"] == "succeeded" and records[0]["job"] == mine.id
    assert all(r["user"] == "pyuser" for r in user.history(since="1h"))
    with pytest.raises(PermissionDenied):
        user.history(user="root")
    totals = c.usage(since="1h", by="user")
    assert any(t["key"] == "pyuser" and t["tasks"] >= 1 for t in totals["totals"]), totals
    # Container images go through; a bad reference is refused at its field.
    with pytest.raises(BadInput) as bad:
        c.submit(["true"], image="python:3.12")
    assert bad.value.field == "image", bad.value
    with pytest.raises(NotSupported):
        c.submit(program="prog.toml")


def ca_of(cluster: Cluster) -> str:
    return f"{cluster.exports['HETSCHED_CERTS_DIR']}/ca.crt"


def requests_by_route(cluster: Cluster) -> Dict[str, int]:
    """The server's HTTP request counts by route, summed over the masters."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=ca_of(cluster))
    counts: Dict[str, int] = {}
    for url in cluster.exports["HETSCHED_API"].split(","):
        req = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {cluster.exports['HETSCHED_TOKEN']}"})
        text = urllib.request.urlopen(req, context=ctx, timeout=10).read().decode()
        for m in re.finditer(r'^hetsched_master_http_requests_total\{route="([^"]+)"\} (\d+)', text, re.M):
            counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    return counts


def delta(before: Dict[str, int], after: Dict[str, int], route: str) -> int:
    return int(after.get(route, 0)) - int(before.get(route, 0))
