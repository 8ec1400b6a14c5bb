#!/usr/bin/env python3
"""Validates Kubernetes manifests against the JSON schemas vendored in deploy/schemas/kubernetes.

    k8s_schema.py SCHEMA_DIR FILE.yaml...

Every YAML document must be an object with apiVersion and kind, and must validate against
SCHEMA_DIR/<kind>-<group>-<version>.json (the file names of the kubernetes-validate package:
apps/v1 StatefulSet -> statefulset-apps-v1.json, v1 Service -> service-v1.json), whose
"$ref"s point into SCHEMA_DIR/_definitions.json. The "-strict" schemas refuse unknown
fields, so a misspelt key fails as well as a wrong type. A kind with no vendored schema fails:
add it with vendor_k8s_schemas.py. Reads only local files (jsonschema and PyYAML from PyPI).
"""

import json
import pathlib
import re
import sys

import jsonschema
import referencing
import yaml

DEFS_URI = "https://kubernetes.io/api/_definitions.json"


def schema_file(doc):
    """kubernetes-validate's naming: rbac.authorization.k8s.io/v1 -> rbac-v1."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", str(doc["apiVersion"]))
    return f"{str(doc['kind']).lower()}-{api}.json"


def check_file(path, schema_dir, registry):
    """Error lines for one file (empty: valid)."""
    errors = []
    try:
        docs = [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        return [f"{path}: cannot read YAML: {e}"]
    if not docs:
        return [f"{path}: no documents"]
    for i, doc in enumerate(docs, 1):
        where = f"{path} (document {i})"
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            errors.append(f"{where}: not a Kubernetes object (apiVersion and kind)")
            continue
        meta = doc.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        where = f"{path}: {doc['kind']}/{name}"
        fname = schema_dir / schema_file(doc)
        if not fname.is_file():
            errors.append(f"{where}: no schema vendored for {doc['apiVersion']} {doc['kind']} ({fname.name})")
            continue
        schema = json.loads(fname.read_text())
        validator = jsonschema.Draft202012Validator(schema, registry=registry)
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            at = ".".join(str(p) for p in err.absolute_path) or "(top)"
            errors.append(f"{where}: {at}: {err.message}")
    return errors


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    schema_dir = pathlib.Path(argv[1])
    defs = json.loads((schema_dir / "_definitions.json").read_text())
    resource = referencing.Resource.from_contents(defs)
    registry = referencing.Registry().with_resource(DEFS_URI, resource)
    errors = []
    for path in argv[2:]:
        errors += check_file(path, schema_dir, registry)
    for e in errors:
        print(e)
    if not errors:
        print(f"ok -- {len(argv) - 2} file(s) valid against {schema_dir.name}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
