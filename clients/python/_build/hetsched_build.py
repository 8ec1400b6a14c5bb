"""A PEP 517 build backend of the standard library alone, for this package only.

`pip install ./clients/python` must work offline in a fresh virtualenv: a backend that
pip would first download (setuptools, hatchling) does not. This one writes the wheel
(the `hetsched` package, `py.typed` included) and the sdist from `pyproject.toml`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11: the version and name are read by hand.
    tomllib = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "hetsched"
README_FILE = ROOT / "README.md"


def _project() -> Dict[str, object]:
    text = (ROOT / "pyproject.toml").read_text()
    if tomllib is not None:
        return dict(tomllib.loads(text)["project"])
    fields: Dict[str, object] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in ("name", "version", "description", "requires-python"):
            fields.setdefault(key, value.strip('"'))
    return fields


def _metadata() -> Tuple[str, str, str]:
    p = _project()
    name, version = str(p["name"]), str(p["version"])
    readme = README_FILE.read_text() if README_FILE.exists() else ""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '>=3.9')}",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ]
    return name, version, "\n".join(lines)


def _files() -> List[Path]:
    pkg = ROOT / PACKAGE
    return sorted(
        p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{arcname},sha256={digest.decode()},{len(data)}"


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, object]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, object]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, object]] = None) -> List[str]:
    return []


def _wheel(wheel_directory: str, editable: bool) -> str:
    name, version, metadata = _metadata()
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    entries: List[Tuple[str, bytes]] = []
    if editable:
        entries.append((f"{name}.pth", (str(ROOT) + "\n").encode()))
    else:
        for f in _files():
            entries.append((f.relative_to(ROOT).as_posix(), f.read_bytes()))
    entries.append((f"{dist_info}/METADATA", metadata.encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: hetsched_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries.append((f"{dist_info}/WHEEL", wheel.encode()))
    entries.append((f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode()))
    record = [_record_line(a, d) for a, d in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            z.writestr(arcname, data)
    return wheel_name


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, object]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    return _wheel(wheel_directory, editable=False)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, object]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    return _wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, object]] = None) -> str:
    name, version, metadata = _metadata()
    base = f"{name}-{version}"
    path = os.path.join(sdist_directory, f"{base}.tar.gz")
    files = _files() + [ROOT / "pyproject.toml", ROOT / "_build" / "hetsched_build.py"]
    if README_FILE.exists():
        files.append(README_FILE)
    with tarfile.open(path, "w:gz") as t:
        for f in files:
            t.add(f, arcname=f"{base}/{f.relative_to(ROOT).as_posix()}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = metadata.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return f"{base}.tar.gz"
