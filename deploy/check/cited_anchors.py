#!/usr/bin/env python3
"""Every document path and anchor that code and docs cite exists; .ci/run runs it.

    cited_anchors.py [ROOT]        check the tree at ROOT (default: the repository)
    cited_anchors.py --self-test   plant a dangling path, anchor, heading and section in a
                                   temporary tree and show that each one is refused

Looks in *.rs, *.md, *.sh, *.toml and *.py files (not .git, target, fuzz corpora) for these
forms of citation of a Markdown file, and checks each against the file it names:

- `FILE.md#anchor` (a Markdown link or plain text in a comment): FILE exists and has the
  anchor, an explicit `<a id="anchor">` or the GitHub id of one of its headings;
- `FILE.md, "Heading"`, `FILE.md "Heading"`, `FILE.md ("Heading"`: FILE exists and a heading
  (or a paragraph's bold or italic lead) starts with the quoted text; a quotation that runs past the
  end of the line is checked up to there;
- `FILE.md §S2.3` and `FILE.md, S2.3` (the seed sections of docs/DESIGN.md): FILE has a
  heading `S2.3 — ...`;
- `[text](#anchor)` in a Markdown file: the file itself has the anchor;
- `[text](FILE.md)` and any path like `docs/X.md` or `BENCHMARKS.md`: the file exists;
- in a Markdown page (not the history of docs/perf-log/ and BENCHMARKS.md), a path into the
  tree in backticks (`slave/src/link.rs`, `master/index/`): it exists.

A path is looked up from the citing file's folder, then from the root; a path that leaves
the repository (`../shared/...`) or is a URL is skipped. Exit status: 0 every citation
resolves, 1 some do not (each listed as FILE:LINE: citation: why).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

EXTS = (".rs", ".md", ".sh", ".toml", ".py")
SKIP_DIRS = {".git", "target", "node_modules", "corpus", "seeds", "regressions-out"}
# A Markdown path: letters, digits, _ . - / and no spaces, ending in .md.
PATH = r"(?<![\w./:-])((?:\.\.?/)?[\w.-]+(?:/[\w.-]+)*\.md)"
ANCHOR_RE = re.compile(PATH + r"#([\w-]+)")
QUOTED_RE = re.compile(PATH + r"`?(?:,| \(|\)?,)? *[\"“](`?[^\"”]+)(?:[\"”]|$)")
SECTION_RE = re.compile(PATH + r"`?(?:,| )? *§?((?:S\d(?:\.\d+)?)(?:(?:[–-]|, §?)S?\d(?:\.\d+)?)*)\b")
BARE_RE = re.compile(PATH)
# A path into the repository's own tree in backticks, in a Markdown page (`slave/src/link.rs`,
# `master/core/src/sched/`): such a path must exist, so that a page does not send a reader to
# a file that moved. History pages (docs/perf-log/, BENCHMARKS.md's past figures) describe the
# tree of their day and are not checked.
TREE_RE = re.compile(r"`((?:common|consensus|master|slave|src|tests|chaos|deploy|docs|fuzz)/[\w./-]*)`")
HISTORY = ("docs" + os.sep + "perf-log" + os.sep, "BENCHMARKS.md")
# Folders a reader makes by following the page (not in a checkout).
MADE_BY_READER = {"deploy/certs/"}


def slug(heading):
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Doc:
    """The anchors, headings and seed sections of one Markdown file."""

    def __init__(self, path):
        self.anchors, self.headings, self.sections = set(), [], set()
        fence = False
        seen = {}
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lstrip().startswith("```"):
                    fence = not fence
                    continue
                if fence:
                    continue
                for m in re.finditer(r"""<a\s+(?:id|name)=["']([^"']+)["']""", line):
                    self.anchors.add(m.group(1))
                m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    text = m.group(1)
                    self.headings.append(norm(text))
                    s = slug(text)
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    self.anchors.add(s if n == 0 else "%s-%d" % (s, n))
                    sec = re.match(r"(?:\d+\.\s+)?(S\d(?:\.\d+)?)\s+—", text)
                    if sec:
                        self.sections.add(sec.group(1))
                m = re.match(r"^\*{1,2}([^*]+)", line.strip())
                if m:
                    self.headings.append(norm(m.group(1)))


def norm(text):
    """Heading text compared without Markdown's backticks, stars and spacing."""
    return re.sub(r"\s+", " ", text.replace("`", "").replace("*", "")).strip().lower()


def files(root):
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            if name.endswith(EXTS):
                yield os.path.join(top, name)


def resolve(root, citing, target):
    """The cited file's path, None when it leaves the repository, False when it is missing."""
    for base in (os.path.dirname(citing), root):
        p = os.path.normpath(os.path.join(base, target))
        if not (p + os.sep).startswith(os.path.normpath(root) + os.sep):
            if base == root:
                return None
            continue
        if os.path.isfile(p):
            return p
    top = os.path.normpath(os.path.join(os.path.dirname(citing), target))
    if not (top + os.sep).startswith(os.path.normpath(root) + os.sep):
        return None
    return False


def sections_of(spec):
    """`S2.3–S2.6` → S2.3, S2.6; `S4.3–5` → S4.3, S4.5; `S3.1, §S3.3` → S3.1, S3.3."""
    out, major = [], None
    for part in re.split(r"[–-]|, §?", spec):
        part = part.strip()
        if not part:
            continue
        if not part.startswith("S"):
            part = "S%s.%s" % (major, part) if major else "S" + part
        major = part[1:].split(".")[0]
        out.append(part)
    return out


def check(root):
    root = os.path.abspath(root)
    docs, problems = {}, []

    def doc(p):
        if p not in docs:
            docs[p] = Doc(p)
        return docs[p]

    for path in files(root):
        rel = os.path.relpath(path, root)
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue  # its own examples
        # Vendored crates keep their upstream docs, whose links are not ours to check.
        vendored = rel.startswith("vendor" + os.sep)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            if "://" in line and not ANCHOR_RE.search(line.split("://")[0] + " "):
                line = re.sub(r"\w+://\S+", "", line)
            where = "%s:%d" % (rel, n)
            for m in [] if vendored else BARE_RE.finditer(line):
                target = resolve(root, path, m.group(1))
                if target is False:
                    problems.append("%s: %s: no such file" % (where, m.group(1)))
            for m in ANCHOR_RE.finditer(line):
                target = resolve(root, path, m.group(1))
                if target and m.group(2) not in doc(target).anchors:
                    problems.append("%s: %s#%s: no such anchor" % (where, m.group(1), m.group(2)))
            if path.endswith(".md") and not vendored and not rel.startswith(HISTORY):
                for m in TREE_RE.finditer(line):
                    bases = (os.path.dirname(path), root)
                    if m.group(1) in MADE_BY_READER:
                        continue
                    if not any(os.path.exists(os.path.join(b, m.group(1))) for b in bases):
                        problems.append("%s: %s: no such file or folder" % (where, m.group(1)))
            if path.endswith(".md"):
                for m in re.finditer(r"\]\(#([\w-]+)\)", line):
                    if m.group(1) not in doc(path).anchors:
                        problems.append("%s: #%s: no such anchor in this file" % (where, m.group(1)))
            for m in QUOTED_RE.finditer(line):
                target = resolve(root, path, m.group(1))
                quote = norm(m.group(2))
                if target and quote and not any(h.startswith(quote) for h in doc(target).headings):
                    problems.append('%s: %s, "%s": no heading starts so' % (where, m.group(1), m.group(2)))
            for m in SECTION_RE.finditer(line):
                target = resolve(root, path, m.group(1))
                if not target:
                    continue
                for sec in sections_of(m.group(2)):
                    if sec not in doc(target).sections:
                        problems.append("%s: %s §%s: no such section" % (where, m.group(1), sec))
    return list(dict.fromkeys(problems))  # a path cited twice on a line is listed once


def self_test():
    tmp = tempfile.mkdtemp(prefix="cited-anchors-")
    try:
        os.makedirs(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, "docs", "DESIGN.md"), "w") as f:
            f.write('# Design\n\n<a id="kept"></a>\n## Flows\n\n### S2 — planner\n\n#### S2.3 — Packing\n')
        with open(os.path.join(tmp, "lib.rs"), "w") as f:
            f.write(
                "//! good: docs/DESIGN.md#kept, docs/DESIGN.md#flows, docs/DESIGN.md, \"Flows\",\n"
                "//! docs/DESIGN.md §S2.3, docs/DESIGN.md §S2\n"
                "//! planted: docs/DESIGN.md#gone\n"
                "//! planted: docs/DESIGN.md, \"Vanished heading\"\n"
                "//! planted: docs/DESIGN.md §S2.9\n"
                "//! planted: docs/MISSING.md\n"
            )
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write("[ok](docs/DESIGN.md#s23--packing) and [planted](docs/DESIGN.md#nope)\n"
                    "[here](#here) [planted](#not-here)\n\n## Here\n"
                    "good: `docs/DESIGN.md`, `docs/`; planted: `slave/src/moved.rs`\n")
        got = check(tmp)
        want = [
            "README.md:1: docs/DESIGN.md#nope: no such anchor",
            "README.md:2: #not-here: no such anchor in this file",
            "README.md:5: slave/src/moved.rs: no such file or folder",
            "lib.rs:3: docs/DESIGN.md#gone: no such anchor",
            'lib.rs:4: docs/DESIGN.md, "Vanished heading": no heading starts so',
            "lib.rs:5: docs/DESIGN.md §S2.9: no such section",
            "lib.rs:6: docs/MISSING.md: no such file",
        ]
        for p in got:
            print("  refused, as planted: " + p)
        # The same run through the command line: exit status 1 and each one listed.
        run = subprocess.run([sys.executable, os.path.abspath(__file__), tmp], capture_output=True, text=True)
        if sorted(got) != sorted(want) or run.returncode != 1 or any(w not in run.stdout for w in want):
            print("self-test FAILED: wanted exactly\n  " + "\n  ".join(want))
            print("got (exit %d):\n%s" % (run.returncode, run.stdout))
            return 1
        print("self-test passed: %d planted citations refused, the good ones kept, exit 1" % len(want))
        return 0
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("%d cited paths or anchors do not exist" % len(problems))
        return 1
    print("every cited path and anchor exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
