#!/usr/bin/env python3
"""Copies the Kubernetes JSON schemas deploy/k8s needs into deploy/schemas/kubernetes/.

Not run by deploy/validate: it refreshes the vendored copy, which the checks then read
offline. The source is the schema tree that the PyPI package kubernetes-validate ships
(kubernetes_validate/kubernetes-json-schema/vX.Y.Z-local-strict: one file per kind plus
_definitions.json with every type). Only the kinds asked for are copied, and
_definitions.json is cut down to the types they reach through "$ref" (same text otherwise).

    python3 -m venv /tmp/kv && /tmp/kv/bin/pip install kubernetes-validate==1.37.0
    /tmp/kv/bin/python deploy/check/vendor_k8s_schemas.py \\
        /tmp/kv/lib/python3.*/site-packages/kubernetes_validate/kubernetes-json-schema/v1.34.0-local-strict \\
        secret-v1 service-v1 statefulset-apps-v1 daemonset-apps-v1
"""

import json
import pathlib
import re
import sys

DEFS = "_definitions.json"
REF = re.compile(r'"\$ref":\s*"([^"]*)"')


def refs(value):
    """Names under $defs that a JSON value refers to."""
    out = set()
    for ref in REF.findall(json.dumps(value)):
        _, _, frag = ref.partition("#/$defs/")
        if frag:
            out.add(frag)
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1])
    out = pathlib.Path(__file__).resolve().parent.parent / "schemas" / "kubernetes" / src.name
    out.mkdir(parents=True, exist_ok=True)
    defs = json.loads((src / DEFS).read_text())
    todo = set()
    for kind in argv[2:]:
        text = (src / f"{kind}.json").read_text()
        (out / f"{kind}.json").write_text(text)
        todo |= refs(json.loads(text))
    keep = {}
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = defs["$defs"][name]
        todo |= refs(keep[name]) - keep.keys()
    pruned = dict(defs)
    pruned["$defs"] = {k: defs["$defs"][k] for k in sorted(keep)}
    (out / DEFS).write_text(json.dumps(pruned, indent=2) + "\n")
    print(f"{out}: {len(argv) - 2} kinds, {len(keep)} of {len(defs['$defs'])} definitions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
