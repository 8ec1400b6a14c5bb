"""A real cluster for the tests: `hetsched up --no-demo` (3 masters, 1 slave), started once
per session; the client is made from the `export` lines it prints, as a user's would be.

The binary is `$HETSCHED_BIN` (tests/python_client.rs sets it to the one cargo built),
else `hetsched` on the PATH, else `target/debug/hetsched` under the repository. The data
directory is removed afterwards unless `HETSCHED_KEEP` is set.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hetsched import Client  # noqa: E402


def binary() -> str:
    b = os.environ.get("HETSCHED_BIN") or shutil.which("hetsched")
    if b:
        return b
    return str(HERE.parents[2] / "target" / "debug" / "hetsched")


class Cluster:
    """The running `up` and its exports."""

    def __init__(self, proc: "subprocess.Popen[bytes]", exports: Dict[str, str], data: str) -> None:
        self.proc = proc
        self.exports = exports
        self.data = data

    def client(self, **kwargs: Any) -> Client:
        old = dict(os.environ)
        os.environ.update(self.exports)
        try:
            return Client.from_env(**kwargs)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def cli(self, *args: str) -> "subprocess.CompletedProcess[str]":
        env = dict(os.environ, **self.exports, HETSCHED_LOG="warn")
        return subprocess.run([binary(), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    data = tempfile.mkdtemp(prefix="hetsched-pytest-")
    err = open(os.path.join(data, "up.err"), "wb")
    proc = subprocess.Popen(
        [binary(), "up", "--no-demo", "--masters", "3", "--slaves", "1", "--data-dir", os.path.join(data, "up")],
        stdout=subprocess.PIPE,
        stderr=err,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, HETSCHED_LOG="warn"),
    )
    exports: Dict[str, str] = {}
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while "HETSCHED_API" not in exports:
        line = proc.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"hetsched up ended: {open(os.path.join(data, 'up.err')).read()}")
        m = re.match(r"export (HETSCHED_[A-Z_]+)=(\S+)$", line.strip())
        if m:
            exports[m.group(1)] = m.group(2)
        if time.monotonic() > deadline:
            raise RuntimeError("hetsched up printed no HETSCHED_API in 120 s")
    c = Cluster(proc, exports, data)
    # The slave is up before the tests submit.
    client = c.client()
    while not any(n.state == "up" for n in client.nodes()):
        if time.monotonic() > deadline:
            raise RuntimeError("no slave up in 120 s")
        time.sleep(0.2)
    yield c
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    err.close()
    if not os.environ.get("HETSCHED_KEEP"):
        shutil.rmtree(data, ignore_errors=True)
