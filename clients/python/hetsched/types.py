"""Typed views of the API's JSON objects (the CLI's `--json` objects). Each keeps the whole
object in `raw` for the keys it does not name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: A job's states once it ended.
FINAL_JOB_STATES = frozenset({"succeeded", "failed", "cancelled"})
#: A task's states once it ended.
FINAL_TASK_STATES = frozenset({"succeeded", "failed", "cancelled"})


def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) else None


@dataclass(frozen=True)
class Submitted:
    """A submitted job: its id and number of tasks."""

    id: int
    tasks: int


@dataclass(frozen=True)
class Job:
    """A job as `GET /v1/jobs/{id}` shows it."""

    id: int
    name: str
    user: str
    state: str
    tasks: int
    task_states: Dict[str, int]
    submitted_ms: int
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Whether the job ended (succeeded, failed or cancelled)."""
        return self.state in FINAL_JOB_STATES

    @property
    def succeeded(self) -> bool:
        """Whether every task succeeded."""
        return self.state == "succeeded"

    @classmethod
    def of(cls, v: Mapping[str, Any]) -> "Job":
        return cls(
            id=int(v["id"]),
            name=str(v.get("name", "")),
            user=str(v.get("user", "")),
            state=str(v.get("state", "")),
            tasks=int(v.get("tasks", 0)),
            task_states={str(k): int(n) for k, n in dict(v.get("task_states") or {}).items()},
            submitted_ms=int(v.get("submitted_ms", 0)),
            raw=v,
        )


@dataclass(frozen=True)
class Task:
    """A task as `GET /v1/tasks` lists it."""

    id: int
    job: int
    index: int
    state: str
    attempt: int
    node: Optional[int]
    exit_code: Optional[int]
    reason: Optional[str]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Whether the task ended."""
        return self.state in FINAL_TASK_STATES

    @classmethod
    def of(cls, v: Mapping[str, Any]) -> "Task":
        reason = v.get("reason")
        return cls(
            id=int(v["id"]),
            job=int(v.get("job_id", 0)),
            index=int(v.get("index", 0)),
            state=str(v.get("state", "")),
            attempt=int(v.get("attempt", 0)),
            node=_int(v.get("node")),
            exit_code=_int(v.get("exit_code")),
            reason=str(reason) if reason is not None else None,
            raw=v,
        )


@dataclass(frozen=True)
class Node:
    """A node as `GET /v1/nodes` lists it."""

    id: int
    name: str
    state: str
    draining: bool
    tasks: int
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, v: Mapping[str, Any]) -> "Node":
        return cls(
            id=int(v["id"]),
            name=str(v.get("name", "")),
            state=str(v.get("state", "")),
            draining=bool(v.get("draining", False)),
            tasks=int(v.get("tasks", 0)),
            raw=v,
        )


@dataclass(frozen=True)
class FlowSubmitted:
    """A submitted flow: its id and each step's job."""

    id: int
    jobs: Dict[str, int]


@dataclass(frozen=True)
class Event:
    """One change of a job's or a task's state (`GET /v1/events`); `seq` is the log index
    of the entry that made it."""

    seq: int
    kind: str
    job: int
    task: Optional[int]
    user: str
    state: str

    @classmethod
    def of(cls, v: Mapping[str, Any]) -> "Event":
        return cls(
            seq=int(v["seq"]),
            kind=str(v["kind"]),
            job=int(v["job"]),
            task=_int(v.get("task")),
            user=str(v.get("user", "")),
            state=str(v.get("state", "")),
        )


def steps_json(steps: List[Mapping[str, Any]]) -> Dict[str, Any]:
    """A flow's body: `{"step": [...]}`."""
    return {"step": [dict(s) for s in steps]}
