"""The transport: HTTPS (or plain HTTP on an `--insecure` cluster) to the masters' API with
the standard library alone, following the leader.

Any master answers the API and a follower sends a write on to the leader itself; what the
client follows is the *set* of masters: it sticks to the last master that answered and,
when that one cannot be reached or answers `unavailable`/`busy`, tries the next, backing
off, until `retry_for` seconds passed (then `Unavailable`). Every retried write is
idempotent: submits carry an idempotency key (docs/CONTRACT.md, "HTTP API").
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import BadInput, HetschedError, Unavailable, from_answer


@dataclass(frozen=True)
class Endpoint:
    """One master's API."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> "Endpoint":
        u = urllib.parse.urlsplit(url.strip() if "://" in url else f"https://{url.strip()}")
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BadInput(f"{url!r} is not an http:// or https:// address", field="url")
        default = 443 if u.scheme == "https" else 80
        try:
            port = u.port or default
        except ValueError as e:
            raise BadInput(f"{url!r}: {e}", field="url") from None
        return cls(u.scheme, u.hostname, port)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


class Transport:
    """Requests to the masters at `urls`, following the one that answers."""

    def __init__(
        self,
        urls: Sequence[str],
        token: Optional[str],
        ca: Optional[str],
        timeout: float,
        retry_for: float,
    ) -> None:
        if not urls:
            raise BadInput("no API address given (HETSCHED_API or Client(url))", field="url")
        self.endpoints: List[Endpoint] = [Endpoint.parse(u) for u in urls]
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for
        self._ssl = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        self._current = 0
        # One kept-alive connection per master and thread for whole answers (streams get
        # their own): a client may be shared by threads.
        self._local = threading.local()

    @property
    def _kept(self) -> Dict[Endpoint, http.client.HTTPConnection]:
        kept: Optional[Dict[Endpoint, http.client.HTTPConnection]] = getattr(self._local, "kept", None)
        if kept is None:
            kept = {}
            self._local.kept = kept
        return kept

    def _connect(self, e: Endpoint, timeout: float) -> http.client.HTTPConnection:
        if e.scheme == "https":
            return http.client.HTTPSConnection(e.host, e.port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(e.host, e.port, timeout=timeout)

    def _send(
        self,
        e: Endpoint,
        method: str,
        path: str,
        data: Optional[bytes],
        h: Mapping[str, str],
        timeout: float,
        stream: bool,
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One request to `e`: on its kept connection (once more on a fresh one when the
        kept one was closed meanwhile), or a fresh one for a stream."""
        kept = None if stream else self._kept.pop(e, None)
        if kept is not None:
            try:
                kept.timeout = timeout
                if kept.sock is not None:
                    kept.sock.settimeout(timeout)
                kept.request(method, path, body=data, headers=dict(h))
                return kept, kept.getresponse()
            except (OSError, http.client.HTTPException):
                kept.close()
        conn = self._connect(e, timeout)
        conn.request(method, path, body=data, headers=dict(h))
        return conn, conn.getresponse()

    def keep(self, conn: http.client.HTTPConnection) -> None:
        """Gives back a connection whose answer was read whole."""
        for e in self.endpoints:
            if conn.host == e.host and conn.port == e.port:
                old = self._kept.pop(e, None)
                if old is not None and old is not conn:
                    old.close()
                self._kept[e] = conn
                return
        conn.close()

    def open(
        self,
        method: str,
        path: str,
        body: Optional[Any] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        stream: bool = True,
    ) -> http.client.HTTPResponse:
        """Sends one request, retrying on other masters while none answers; returns the
        open response of a success (status < 400), raises the error of any other. With
        `stream=False` the caller reads the answer whole and gives the connection back
        ([`keep`]); otherwise it is the response's own."""
        data = None if body is None else json.dumps(body).encode()
        h: Dict[str, str] = {"Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(headers or {})
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        last = "no master tried"
        while True:
            e = self.endpoints[self._current]
            try:
                conn, resp = self._send(e, method, path, data, h, timeout or self.timeout, stream)
            except (OSError, http.client.HTTPException) as err:
                last = f"{e}: {err}"
            else:
                if resp.status < 400:
                    resp.conn = conn  # type: ignore[attr-defined]
                    return resp
                answer = _json_or_none(resp.read())
                self.keep(conn)
                failure = from_answer(resp.status, answer)
                if not isinstance(failure, Unavailable):
                    raise failure
                last = f"{e}: {failure.message}"
            # This master could not serve it: the next one, after a pause.
            self._current = (self._current + 1) % len(self.endpoints)
            if time.monotonic() + delay > deadline:
                raise Unavailable(f"no master answered within {self.retry_for:g} s: {last}")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def json(
        self,
        method: str,
        path: str,
        body: Optional[Any] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """A request whose answer is JSON."""
        resp = self.open(method, path, body, headers, timeout, stream=False)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as err:
            resp.close()
            raise Unavailable(f"{method} {path}: the answer broke off: {err}") from None
        self.keep(resp.conn)  # type: ignore[attr-defined]
        value = _json_or_none(raw)
        if value is None and raw:
            raise HetschedError(f"{method} {path}: the answer is not JSON")
        return value


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def query(**params: Any) -> str:
    """`?a=1&b=x` of the parameters that are not None ('' for none)."""
    kept = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items() if v is not None}
    return f"?{urllib.parse.urlencode(kept)}" if kept else ""
