#!/usr/bin/env python3
"""Makes a tiny OCI image layout for deploy/check-gpu-host.sh's container step.

    oci_image.py LAYOUT_DIR TAG BUSYBOX [HOST_FILE...]

The image holds the static busybox at /bin/busybox with /bin/sh, ls, cat, echo and env
linked to it, /etc/passwd, the empty /dev /proc /sys /tmp, and each HOST_FILE copied at
its own path (e.g. the host's nvidia-smi and the C libraries it links against, so that the
container can run it with the driver libraries the slave binds in). One gzip layer,
tagged TAG, as `skopeo copy ... oci:LAYOUT_DIR:TAG` would make. Exit status 2 on bad usage
or an unreadable file.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def add(tar, name, kind, data=b"", mode=0o644, target=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, 0
    if kind == tarfile.REGTYPE:
        info.size = len(data)
    if kind == tarfile.SYMTYPE:
        info.linkname = target
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def layer(busybox, host_files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs = {"bin", "etc", "dev", "proc", "sys", "tmp"}
        for f in host_files:
            parts = f.strip("/").split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        for d in sorted(dirs):
            add(tar, d, tarfile.DIRTYPE, mode=0o755)
        with open(busybox, "rb") as f:
            add(tar, "bin/busybox", tarfile.REGTYPE, f.read(), 0o755)
        for applet in ["sh", "ls", "cat", "echo", "env"]:
            add(tar, "bin/" + applet, tarfile.SYMTYPE, target="busybox")
        add(tar, "etc/passwd", tarfile.REGTYPE, b"root:x:0:0:root:/tmp:/bin/sh\n")
        for f in host_files:
            with open(f, "rb") as src:
                add(tar, f.strip("/"), tarfile.REGTYPE, src.read(), 0o755)
    return buf.getvalue()


def blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def main(layout, tag, busybox, *host_files):
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    tar = layer(busybox, host_files)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin:/usr/bin"], "User": "0"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
    }
    gz = gzip.compress(tar, compresslevel=1, mtime=0)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **blob(layout, json.dumps(config).encode())},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    **blob(layout, gz)}],
    }
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       **blob(layout, json.dumps(manifest).encode()),
                       "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        main(*sys.argv[1:])
    except OSError as e:
        print(f"oci_image.py: {e}", file=sys.stderr)
        sys.exit(2)
