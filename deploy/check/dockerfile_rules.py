#!/usr/bin/env python3
"""The image rules of deploy/Dockerfile that hadolint leaves out, on top of hadolint's own.

    dockerfile_rules.py DOCKERFILE

- at least two stages, and the last one copies from an earlier one (`COPY --from=...`):
  the toolchain stays in the builder;
- every base image names a tag or digest, and not `latest` (hadolint's DL3006/DL3007 say so
  too, as warnings);
- the last stage switches to a user other than root (hadolint's DL3002 only looks at a USER
  that is there; an image with none runs as root);
- the entrypoint is the `hetsched` binary, in JSON form.
"""

import json
import re
import sys


def instructions(text):
    """(line number, KEYWORD, arguments) with continuation lines joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        keyword, _, args = buf.partition(" ")
        out.append((start, keyword.upper(), args.strip()))
        buf = ""
    return out


def check(text):
    errors, stages = [], []  # stages: [{"name", "line", "ins": [...]}]
    for n, kw, args in instructions(text):
        if kw == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            image = words[0] if words else ""
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            earlier = {s["name"] for s in stages if s["name"]}
            if image not in earlier and image.lower() != "scratch":
                ref = image.rsplit("/", 1)[-1]
                tag = ref.split(":", 1)[1] if ":" in ref else None
                if "@sha256:" not in image and (tag is None or tag == "latest" or "$" in tag):
                    errors.append(f"line {n}: base image {image!r} must name a fixed tag or digest (not latest)")
            stages.append({"name": name, "line": n, "ins": []})
        elif stages:
            stages[-1]["ins"].append((n, kw, args))
        else:
            if kw != "ARG":
                errors.append(f"line {n}: {kw} before the first FROM")
    if len(stages) < 2:
        return errors + ["the image must be built in stages: a builder and a runtime stage"]
    last = stages[-1]
    earlier = {s["name"] for s in stages[:-1] if s["name"]} | {str(i) for i in range(len(stages) - 1)}
    copies = [a for _, kw, a in last["ins"] if kw == "COPY" and re.search(r"--from=(\S+)", a)]
    if not any(re.search(r"--from=(\S+)", a).group(1) in earlier for a in copies):
        errors.append(f"line {last['line']}: the last stage copies nothing from an earlier stage (COPY --from=...)")
    users = [(n, a) for n, kw, a in last["ins"] if kw == "USER"]
    if not users:
        errors.append(f"line {last['line']}: the last stage sets no USER, so the image runs as root")
    else:
        n, user = users[-1]
        if user.split(":", 1)[0] in ("root", "0"):
            errors.append(f"line {n}: the last USER is root")
    entry = [(n, a) for n, kw, a in last["ins"] if kw == "ENTRYPOINT"]
    if not entry:
        errors.append(f"line {last['line']}: the last stage has no ENTRYPOINT")
    else:
        n, a = entry[-1]
        try:
            form = json.loads(a)
        except ValueError:
            form = None
        if not (isinstance(form, list) and form and str(form[0]).rsplit("/", 1)[-1] == "hetsched"):
            errors.append(f'line {n}: ENTRYPOINT must be ["hetsched"] (JSON form), not {a}')
    return errors


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        text = open(argv[1], encoding="utf-8").read()
    except OSError as e:
        print(f"{argv[1]}: {e}")
        return 1
    errors = check(text)
    for e in errors:
        print(f"{argv[1]}: {e}")
    if not errors:
        print(f"ok -- {argv[1]} follows the image rules")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
