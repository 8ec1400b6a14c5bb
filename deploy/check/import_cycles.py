#!/usr/bin/env python3
"""Fails when the module files of a Rust crate import each other in a circle.

Usage: import_cycles.py SRC_DIR [SRC_DIR ...]   (e.g. slave/src)
       import_cycles.py --self-test

The graph has one node per module file (`lib.rs`, `a.rs`, `a/mod.rs`, `a/b.rs`; `bin/` is
other crates) and an edge from a file to every module file its `crate::`, `super::` and
`self::` paths name — in `use` items (groups expanded) and inline in code alike, comments and
string literals left out. A path names the longest module prefix it has (`crate::a::B` is
`a`). Left out: edges from a module to its own descendants, however spelled (a module's parts
are no import of it: `lib.rs` declares every module), plain paths (`use child::X`, extern
crates), self-edges, and test modules (`#[cfg(test)] mod
…`, inline or in a file of their own), which are leaves that may read anything of their
parent. A circle is printed as `a -> b -> a`; the exit status is 1 when there is one, 2 on
bad input, 0 otherwise.

Why (issue 49): files that import each other in a circle cannot be understood, tested or
moved one at a time; the slave had several such circles (exec/logs/supervisor/pool,
program/forward).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def strip(text):
    """The source with comments removed and string/char literals emptied, lines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def use_paths(tree):
    """The paths of one `use` tree (`crate::{a::{self, B}, c::*}` -> crate::a, crate::a::B,
    crate::c)."""
    tokens = re.findall(r"::|[{},*]|[A-Za-z_][A-Za-z0-9_]*", tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        paths = []
        path = list(prefix)
        while pos < len(tokens):
            t = tokens[pos]
            if t == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    paths += parse(path)
                pos += 1
                return paths
            if t in ("}", ","):
                break
            pos += 1
            if t == "::":
                continue
            if t == "as":
                pos += 1  # the alias
                continue
            if t == "*":
                continue
            if t == "self":
                if path != list(prefix) or not prefix:
                    path.append(t)
                continue
            path.append(t)
        paths.append(path)
        return paths

    return parse([])


class BadInput(Exception):
    pass


def module_files(src):
    """{module path (tuple): file} for the crate rooted at `src`, and the files of test
    modules."""
    root = os.path.join(src, "lib.rs")
    if not os.path.isfile(root):
        root = os.path.join(src, "main.rs")
    if not os.path.isfile(root):
        raise BadInput(f"{src}: no lib.rs or main.rs")
    mods, tests = {(): root}, set()
    todo = [((), root)]
    decl = re.compile(
        r"((?:#\s*\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;"
    )
    while todo:
        path, f = todo.pop()
        with open(f, encoding="utf-8") as fh:
            text = strip(fh.read())
        base = os.path.dirname(f)
        if not (os.path.basename(f) in ("lib.rs", "main.rs", "mod.rs")):
            base = os.path.join(base, os.path.splitext(os.path.basename(f))[0])
        for m in decl.finditer(text):
            attrs, name = m.group(1), m.group(2)
            explicit = re.search(r'path\s*=\s*"', attrs)
            if re.search(r"cfg\s*\(\s*test\s*\)", attrs):
                continue  # a test module: not in the graph
            if explicit:
                raise BadInput(f"{f}: #[path] on a product module is not understood")
            cands = [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]
            found = [c for c in cands if os.path.isfile(c)]
            if not found:
                raise BadInput(f"{f}: module {name} has no file")
            mods[path + (name,)] = found[0]
            todo.append((path + (name,), found[0]))
    return mods


def edges_of(path, f, mods):
    """The module files `f` (module `path`) names through crate::/super::/self:: paths."""
    with open(f, encoding="utf-8") as fh:
        text = strip(fh.read())
    # Inline modules: the brace depth at which each opens, test ones skipped whole.
    inline = re.compile(
        r"((?:#\s*\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{"
    )
    opens = {m.end() - 1: (m.group(2), bool(re.search(r"cfg\s*\(\s*test\s*\)", m.group(1))))
             for m in inline.finditer(text)}
    # Walk the text keeping the stack of inline modules; collect (module, path) pairs.
    refs = []
    stack = []  # (depth, name, is_test)
    depth = 0
    use_item = re.compile(r"\buse\s+([^;]*);")
    bare = re.compile(r"\b(crate|super|self)((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
    i, n = 0, len(text)
    segments = []  # (start, end, module path, in test)
    start = 0

    def here():
        return path + tuple(s[1] for s in stack), any(s[2] for s in stack)

    while i < n:
        c = text[i]
        if c == "{" or c == "}":
            segments.append((start, i, *here()))
            start = i + 1
            if c == "{":
                depth += 1
                if i in opens:
                    stack.append((depth, *opens[i]))
            else:
                if stack and stack[-1][0] == depth:
                    stack.pop()
                depth -= 1
        i += 1
    segments.append((start, n, *here()))
    # `use` items may span braces: take them whole, at the module where they start.
    where = lambda pos: next((s for s in segments if s[0] <= pos <= s[1]), segments[-1])
    used_spans = []
    for m in use_item.finditer(text):
        seg = where(m.start())
        used_spans.append((m.start(), m.end()))
        if seg[3]:
            continue
        for p in use_paths(m.group(1)):
            refs.append((seg[2], p))
    for m in bare.finditer(text):
        if any(a <= m.start() < b for a, b in used_spans):
            continue
        seg = where(m.start())
        if seg[3]:
            continue
        refs.append((seg[2], [m.group(1)] + IDENT.findall(m.group(2))))
    out = set()
    for at, p in refs:
        if not p or p[0] not in ("crate", "super", "self"):
            continue
        if p[0] == "crate":
            base, rest = (), p[1:]
        else:
            base, rest = at, p
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not base:
                        raise BadInput(f"{f}: super:: above the crate root")
                    base = base[:-1]
                rest = rest[1:]
        target = base + tuple(rest)
        while target not in mods and target:
            target = target[:-1]
        if target not in mods:
            continue
        # A module and its inline submodules are one file; a module's own descendants are
        # its parts, not imports.
        if mods[target] != f and target[: len(path)] != path:
            out.add(mods[target])
    return out


def find_cycle(graph):
    """One circle of `graph` ({node: set of nodes}) as a list ending where it starts, or None."""
    state = {}
    for root in sorted(graph):
        if root in state:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        trail = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                trail.pop()
                continue
            if state.get(nxt) == 1:
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state:
                state[nxt] = 1
                trail.append(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return None


def graph_of(src):
    """{file: files it imports} (paths relative to `src`), and {file: its module path}."""
    mods = module_files(src)
    rel = lambda f: os.path.relpath(f, src)
    graph = {}
    for path, f in mods.items():
        graph.setdefault(rel(f), set()).update(rel(t) for t in edges_of(path, f, mods))
    return graph, {rel(f): path for path, f in mods.items()}


def check(src):
    """Prints each circle of `src` (removing one of its edges to find the next); returns how
    many were found."""
    graph, _ = graph_of(src)
    found = 0
    while True:
        cyc = find_cycle(graph)
        if cyc is None:
            return found
        found += 1
        print(f"{src}: import circle: " + " -> ".join(cyc))
        graph[cyc[-2]].discard(cyc[-1])


def self_test():
    """The check passes on a crate without circles and fails on one with a planted circle,
    through `use` groups, inline paths and `super::`."""
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "a"))
        files = {
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a/mod.rs": "pub mod x;\nuse x::Y;\n// use crate::c::Z; a comment is no import\n",
            "a/x.rs": "use super::super::b::{self, B};\npub struct Y;\n",
            "b.rs": 'pub struct B;\nconst S: &str = "crate::c::Z";\n'
            "#[cfg(test)]\nmod tests { use crate::c::*; }\n",
            "c.rs": "pub struct Z(crate::a::x::Y);\n",
        }
        for name, body in files.items():
            with open(os.path.join(src, name), "w", encoding="utf-8") as fh:
                fh.write(body)
        if check(src) != 0:
            print("self-test: a crate without a circle was reported")
            return 1
        with open(os.path.join(src, "b.rs"), "a", encoding="utf-8") as fh:
            fh.write("fn f() -> crate::c::Z { todo!() }\n")
        if check(src) != 1:
            print("self-test: the planted circle a/x.rs -> b.rs -> c.rs -> a/x.rs was not found")
            return 1
        # The whole script on a copy of a real crate with a planted `use`.
        here = os.path.dirname(os.path.abspath(__file__))
        real = os.path.join(here, "..", "..", "slave", "src")
        if os.path.isdir(real):
            copy = os.path.join(tmp, "slave-src")
            shutil.copytree(real, copy)
            graph, names = graph_of(copy)
            edges = sorted(
                (a, b)
                for a in graph
                for b in graph[a]
                if names[a] and names[a][: len(names[b])] != names[b]
            )
            if not edges:
                print("self-test: no import found in slave/src")
                return 1
            # Plant: the target of the crate's first import (not of an ancestor: that is no
            # import) imports its source back.
            a, b = edges[0]
            with open(os.path.join(copy, b), "a", encoding="utf-8") as fh:
                fh.write(f"\n#[allow(unused_imports)]\nuse crate::{'::'.join(names[a])} as _planted;\n")
            r = subprocess.run([sys.executable, os.path.abspath(__file__), copy],
                               capture_output=True, text=True)
            if r.returncode != 1 or f"{a} -> {b}" not in r.stdout and f"{b} -> {a}" not in r.stdout:
                print(f"self-test: the circle {a} -> {b} -> {a} planted in a copy of slave/src was not found")
                print(r.stdout + r.stderr)
                return 1
            print("self-test: planted in a copy of slave/src, reported:\n" + r.stdout.strip())
        print("self-test: ok")
        return 0
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2 or any(a.startswith("-") for a in argv[1:]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    found = 0
    try:
        for src in argv[1:]:
            found += check(src)
    except (BadInput, OSError, UnicodeDecodeError) as e:
        print(f"import_cycles: {e}", file=sys.stderr)
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
