"""The client: submit, list, follow and wait for work on a hetsched cluster over its HTTP API
(docs/guide/api.md; the Python guide is docs/guide/python.md)."""

from __future__ import annotations

import codecs
import http.client
import json
import os
import socket
import time
import uuid
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Union,
    overload,
)

from ._http import Transport, query
from .errors import BadInput, Gone, NotSupported
from .types import Event, FlowSubmitted, Job, Node, Submitted, Task, steps_json

#: A job named by its id, its submission or its view.
JobRef = Union[int, Submitted, Job]

#: Longest long poll of one request (the server caps a wait at 10 minutes).
WAIT_PER_REQUEST = 30.0


def job_id(j: JobRef) -> int:
    """The id of a job reference."""
    if isinstance(j, (Submitted, Job)):
        return j.id
    if isinstance(j, int) and not isinstance(j, bool) and j > 0:
        return j
    raise BadInput(f"{j!r} is not a job (an id, a Submitted or a Job)", field="job")


def _seconds(s: float) -> str:
    return f"{max(int(s * 1000), 1)}ms"


class Client:
    """A client of one cluster.

    `url`: one master's API base (`https://127.0.0.1:9100`) or several, as a list or
    comma-separated (every master serves the API; the client follows the one that
    answers). `token`: an API token (`hst....`); `ca`: the cluster CA's certificate file.
    `timeout`: seconds one request may take; `retry_for`: how long to keep trying other
    masters while none answers (elections, restarts) before `Unavailable`.
    """

    def __init__(
        self,
        url: Union[str, Sequence[str]],
        token: Optional[str] = None,
        ca: Optional[str] = None,
        *,
        timeout: float = 30.0,
        retry_for: float = 15.0,
    ) -> None:
        urls = [u for u in (url.split(",") if isinstance(url, str) else url) if u.strip()]
        self._t = Transport(urls, token, ca, timeout, retry_for)

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """The client of the cluster whose `export` lines `hetsched up` printed:
        `HETSCHED_API`, `HETSCHED_TOKEN` and the CA in `HETSCHED_CERTS_DIR`."""
        api = os.environ.get("HETSCHED_API", "")
        if not api.strip():
            raise BadInput("HETSCHED_API is not set (hetsched up prints it)", field="HETSCHED_API")
        certs = os.environ.get("HETSCHED_CERTS_DIR")
        ca = os.path.join(certs, "ca.crt") if certs else None
        if ca is not None and not os.path.exists(ca):
            raise BadInput(f"{ca}: no such file (HETSCHED_CERTS_DIR)", field="HETSCHED_CERTS_DIR")
        return cls(api, token=os.environ.get("HETSCHED_TOKEN") or None, ca=ca, **kwargs)

    # --- writes -----------------------------------------------------------------------

    def submit(
        self,
        command: Optional[Sequence[str]] = None,
        *,
        name: Optional[str] = None,
        cpus: Optional[float] = None,
        mem: Optional[Union[int, str]] = None,
        gpus: Optional[float] = None,
        gpu_model: Optional[str] = None,
        count: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        after: Optional[Iterable[JobRef]] = None,
        after_any: Optional[Iterable[JobRef]] = None,
        after_fail: Optional[Iterable[JobRef]] = None,
        after_each: Optional[JobRef] = None,
        idempotency_key: Optional[str] = None,
        program: Optional[str] = None,
        image: Optional[str] = None,
        **spec: Any,
    ) -> Submitted:
        """Submits a job of `count` tasks each running `command` (an argv list). Other
        keys of a job spec file (docs/guide/cli.md: `nodes`, `retries`, `backoff`,
        `timeout`, `partition`, `max_running`, `singleton`, `allow_unplaceable`, ...) go
        as keyword arguments. The submit is idempotent: it carries `idempotency_key` (a
        fresh one when not given), so the client's own retries, and yours with the same
        key within 24 h, give one job. `image` runs each task in a container image
        (docs/guide/containers.md: `oci:DIR[:TAG]`, `oci-archive:FILE`, `docker-archive:FILE`,
        `docker://HOST/NAME:TAG`); with it `command` may be None (the image's entrypoint)."""
        if program is not None:
            raise NotSupported(
                "API programs are submitted with the CLI (hetsched submit --program): the "
                "HTTP API's job body carries a command"
            )
        if isinstance(command, str):
            raise BadInput("command is an argv list, not a string", field="command")
        body: Dict[str, Any] = {k: v for k, v in spec.items() if v is not None}
        if command is not None:
            body["command"] = list(command)
        if image is not None:
            body["image"] = image
        resources = {
            k: v
            for k, v in (("cpus", cpus), ("mem", mem), ("gpus", gpus), ("gpu_model", gpu_model))
            if v is not None
        }
        if resources:
            body["resources"] = resources
        if name is not None:
            body["name"] = name
        if count is not None:
            body["count"] = count
        if env is not None:
            body["env"] = dict(env)
        for k, refs in (("after", after), ("after_any", after_any), ("after_fail", after_fail)):
            if refs is not None:
                body[k] = [job_id(r) for r in refs]
        if after_each is not None:
            body["after_each"] = job_id(after_each)
        key = idempotency_key or f"py-{uuid.uuid4().hex}"
        answer = self._t.json("POST", "/v1/jobs", body, {"Idempotency-Key": key})
        return Submitted(id=int(answer["job_id"]), tasks=int(answer["tasks"]))

    def submit_flow(
        self, steps: Sequence[Mapping[str, Any]], *, idempotency_key: Optional[str] = None
    ) -> FlowSubmitted:
        """Submits a flow: every step's job or none. Each step is a job spec's keys plus
        `name`, `needs`, `needs_any`, `needs_fail` and `each` (docs/guide/cli.md, "Flow
        files"). Idempotent as `submit`."""
        key = idempotency_key or f"py-{uuid.uuid4().hex}"
        v = self._t.json("POST", "/v1/flows", steps_json(list(steps)), {"Idempotency-Key": key})
        return FlowSubmitted(id=int(v["flow_id"]), jobs={str(k): int(j) for k, j in v["jobs"].items()})

    def cancel(self, job: JobRef) -> int:
        """Cancels every unfinished task of `job`; returns how many it cancelled."""
        v = self._t.json("DELETE", f"/v1/jobs/{job_id(job)}")
        return int(v.get("cancelled", 0))

    # --- reads ------------------------------------------------------------------------

    def job(self, job: JobRef) -> Job:
        """One job."""
        return Job.of(self._t.json("GET", f"/v1/jobs/{job_id(job)}"))

    def jobs(
        self,
        *,
        state: Optional[str] = None,
        user: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Job]:
        """Jobs, newest first (a user's token sees its own)."""
        q = query(state=state, user=user, limit=limit)
        return [Job.of(j) for j in self._t.json("GET", f"/v1/jobs{q}")]

    def tasks(
        self,
        job: Optional[JobRef] = None,
        *,
        state: Optional[str] = None,
        user: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Task]:
        """Tasks, newest first; `job`: only that job's."""
        j = job_id(job) if job is not None else None
        q = query(job=j, state=state, user=user, limit=limit)
        return [Task.of(t) for t in self._t.json("GET", f"/v1/tasks{q}")]

    def nodes(self) -> List[Node]:
        """The slaves."""
        return [Node.of(n) for n in self._t.json("GET", "/v1/nodes")]

    def flow(self, flow: int) -> Dict[str, Any]:
        """A flow's steps with their jobs and states (as `flow N --json`)."""
        v: Dict[str, Any] = self._t.json("GET", f"/v1/flows/{int(flow)}")
        return v

    def status(self) -> Dict[str, Any]:
        """The cluster's status (as `status --json`)."""
        v: Dict[str, Any] = self._t.json("GET", "/v1/status")
        return v

    def explain(self, task: int) -> Dict[str, Any]:
        """Why a task waits: every node's verdict, preemption, its queue place."""
        v: Dict[str, Any] = self._t.json("GET", f"/v1/tasks/{int(task)}/explain")
        return v

    @overload
    def logs(self, task: int, *, stderr: bool = ..., attempt: Optional[int] = ...) -> str: ...

    @overload
    def logs(
        self, task: int, *, follow: bool, stderr: bool = ..., attempt: Optional[int] = ...
    ) -> Union[str, Iterator[str]]: ...

    def logs(
        self,
        task: int,
        *,
        follow: bool = False,
        stderr: bool = False,
        attempt: Optional[int] = None,
    ) -> Union[str, Iterator[str]]:
        """A task's output (its latest attempt unless `attempt`): the text so far, or with
        `follow=True` an iterator of pieces as they come until the task ends."""
        q = query(
            stream="stderr" if stderr else None,
            attempt=attempt,
            follow=True if follow else None,
        )
        resp = self._t.open("GET", f"/v1/tasks/{int(task)}/logs{q}", timeout=None if not follow else 3600.0)
        if not follow:
            try:
                return resp.read().decode("utf-8", "replace")
            finally:
                resp.close()
        return _pieces(resp)

    def history(
        self,
        *,
        user: Optional[str] = None,
        job: Optional[JobRef] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        state: Optional[str] = None,
    ) -> List[Dict[str, Any]]:
        """Ended attempts' usage records, oldest first (`hetsched history --json`'s
        records: user, job, task, attempt, node, times, what was asked and used — `cpu_s`,
        `max_mem_mib`, `gpu_s`, `None` where nothing was measured — state, reason).
        `since`/`until`: a duration back (`2h`) or a time; a user's token sees its own."""
        j = job_id(job) if job is not None else None
        q = query(user=user, job=j, since=since, until=until, state=state)
        v: Dict[str, Any] = self._t.json("GET", f"/v1/accounting/history{q}")
        records: List[Dict[str, Any]] = v["records"]
        return records

    def usage(
        self,
        *,
        since: Optional[str] = None,
        by: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Usage totals since `since` (default 7d) grouped `by` user, partition or day,
        with each user's fair-share standing (`hetsched usage --json`)."""
        v: Dict[str, Any] = self._t.json(
            "GET", f"/v1/accounting/usage{query(since=since, by=by, user=user)}"
        )
        return v

    # --- waiting ----------------------------------------------------------------------

    @overload
    def wait(self, jobs: JobRef, timeout: Optional[float] = ...) -> Job: ...

    @overload
    def wait(self, jobs: Iterable[JobRef], timeout: Optional[float] = ...) -> List[Job]: ...

    def wait(
        self, jobs: Union[JobRef, Iterable[JobRef]], timeout: Optional[float] = None
    ) -> Union[Job, List[Job]]:
        """Waits until the job (or every job of a list) ended, or `timeout` seconds passed;
        returns the job(s) as they are then (`Job.done` says which). One job: a long poll
        (`GET /v1/jobs/{id}/wait`), one request at a time. Several: one event stream
        (`GET /v1/events`) for all of them. Never a poll loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if isinstance(jobs, (int, Submitted, Job)):
            return self._wait_one(job_id(jobs), deadline)
        ids = [job_id(j) for j in jobs]
        if len(ids) == 1:
            return [self._wait_one(ids[0], deadline)]
        return self._wait_many(ids, deadline)

    def _wait_one(self, job: int, deadline: Optional[float]) -> Job:
        while True:
            left = WAIT_PER_REQUEST if deadline is None else deadline - time.monotonic()
            step = max(min(left, WAIT_PER_REQUEST), 0.001)
            v = self._t.json("GET", f"/v1/jobs/{job}/wait?timeout={_seconds(step)}", timeout=step + 30.0)
            j = Job.of(v)
            if j.done or (deadline is not None and time.monotonic() >= deadline):
                return j

    def _wait_many(self, ids: List[int], deadline: Optional[float]) -> List[Job]:
        since: Optional[int] = None
        while True:
            try:
                stream = _EventStream(self._t, since, deadline)
            except Gone as g:
                since = g.oldest
                continue
            # The states after the stream opened: what ended before is seen here, what
            # ends after comes as an event.
            left = self._unfinished(ids)
            try:
                for e in stream:
                    if e.kind == "job" and e.job in left and e.state in ("succeeded", "failed", "cancelled"):
                        left.discard(e.job)
                    if not left:
                        break
            except Gone as g:
                since = g.oldest
                continue
            finally:
                stream.close()
            if not left or stream.expired:
                return self._jobs_by_id(ids)
            since = stream.last

    def _unfinished(self, ids: List[int]) -> Set[int]:
        return {j.id for j in self._jobs_by_id(ids) if not j.done}

    def _jobs_by_id(self, ids: List[int]) -> List[Job]:
        listed = {j.id: j for j in self.jobs()}
        missing = [i for i in ids if i not in listed]
        for i in missing:
            listed[i] = self.job(i)
        return [listed[i] for i in ids]

    def events(self, since: Optional[int] = None) -> Iterator[Event]:
        """Job and task state changes as they happen (`GET /v1/events`), from after log
        index `since` (default: now); raises `Gone` (with `oldest`) when the master no
        longer keeps what came after `since`."""
        stream = _EventStream(self._t, since, None)
        try:
            yield from stream
        finally:
            stream.close()


class _EventStream:
    """One `GET /v1/events` response, read as events until `deadline` (monotonic)."""

    def __init__(self, t: Transport, since: Optional[int], deadline: Optional[float]) -> None:
        self.deadline = deadline
        self.expired = False
        # A keep-alive comes every 15 s: a read waits a little longer than that.
        self.resp = t.open("GET", f"/v1/events{query(since=since)}", headers={"Accept": "text/event-stream"}, timeout=20.0)
        self.last = since

    def close(self) -> None:
        self.resp.close()

    def __iter__(self) -> Iterator[Event]:
        data: List[str] = []
        event = ""
        while True:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.expired = True
                    return
                _set_read_timeout(self.resp, min(left, 20.0))
            try:
                raw = self.resp.readline()
            except (socket.timeout, TimeoutError):
                self.expired = self.deadline is not None and time.monotonic() >= self.deadline
                return
            except (OSError, http.client.HTTPException):
                return
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith(": since "):
                self.last = int(line[len(": since "):]) if self.last is None else self.last
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                payload = json.loads("\n".join(data))
                data = []
                if event == "gone":
                    raise Gone("the master no longer keeps these events", int(payload.get("oldest", 0)))
                e = Event.of(payload)
                self.last = e.seq
                yield e


def _set_read_timeout(resp: http.client.HTTPResponse, seconds: float) -> None:
    sock = getattr(getattr(resp, "fp", None), "raw", None)
    sock = getattr(sock, "_sock", None)
    if isinstance(sock, socket.socket):
        sock.settimeout(seconds)


def _pieces(resp: http.client.HTTPResponse) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                tail = decoder.decode(b"", final=True)
                if tail:
                    yield tail
                return
            text = decoder.decode(chunk)
            if text:
                yield text
    finally:
        resp.close()


__all__ = ["Client", "JobRef", "job_id"]
