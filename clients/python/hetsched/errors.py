"""Errors as exceptions that mirror the CLI's exit codes (docs/CONTRACT.md, "Exit codes").

Every exception carries the server's `message`, the `field` to blame when the server named
one, the HTTP `status` and the error `kind`; `exit_code` is what the CLI would exit with.
"""

from __future__ import annotations

from typing import Optional


class HetschedError(Exception):
    """Any error the cluster answered (or no answer at all: `Unavailable`)."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        field: Optional[str] = None,
        status: Optional[int] = None,
        kind: Optional[str] = None,
    ) -> None:
        super().__init__(message if field is None else f"{message} (field {field})")
        self.message = message
        self.field = field
        self.status = status
        self.kind = kind


class BadInput(HetschedError):
    """400 / 413 `bad-input`: the request is wrong (CLI exit 2); `field` names the culprit."""

    exit_code = 2


class PermissionDenied(HetschedError):
    """403 `forbidden`, or 401 `unauthenticated` (no or a bad token): CLI exit 3."""

    exit_code = 3


class NotFound(HetschedError):
    """404 `not-found` (CLI exit 4); a garbage-collected id says "collected"."""

    exit_code = 4


class Unavailable(HetschedError):
    """503 `unavailable` or 429 `busy`, or no master answered in time: retry (CLI exit 5)."""

    exit_code = 5


class Gone(HetschedError):
    """410 `gone`: the event stream no longer has what came after `since`. Re-read the
    state, then resume from `oldest`."""

    def __init__(self, message: str, oldest: int) -> None:
        super().__init__(message, status=410, kind="gone")
        self.oldest = oldest


class NotSupported(HetschedError):
    """A feature this client names but the server does not offer yet."""


def from_answer(status: int, body: object) -> HetschedError:
    """The exception of an error answer `{"error": {"kind", "message", "field"?}}`."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    message = str(error.get("message") or f"HTTP {status}")
    field = error.get("field")
    field = str(field) if field is not None else None
    kind = str(error.get("kind") or "")
    if status == 410:
        oldest = error.get("oldest")
        return Gone(message, int(oldest) if isinstance(oldest, int) else 0)
    cls: type = HetschedError
    if status in (400, 413):
        cls = BadInput
    elif status in (401, 403):
        cls = PermissionDenied
    elif status == 404:
        cls = NotFound
    elif status in (429, 503):
        cls = Unavailable
    err: HetschedError = cls(message, field=field, status=status, kind=kind)
    return err
