"""Structure lint for the Rust crates (`make lint`, mk/lint.mk): fails on

(a) an import cycle between the modules of one crate: module a names module b (a `use` or a path
    through `crate::`, `super::`, `self::` or a child module) and b names a, directly or through
    others. Test code (`#[cfg(test)]` items and the files of test modules) is left out: a test
    module reaching into its parent is not a design dependency.
(b) a non-test .rs file over 500 lines (inline test modules count: move big ones to their own file,
    e.g. foo/tests.rs).

Usage: python3 tools/rust_structure.py [--max-lines N] [ROOT]    (ROOT: the repository, default .)
       python3 tools/rust_structure.py --self-test                (checks that a planted cycle and a
                                                                    long file are caught)

Reads the files tracked by git (and untracked ones not ignored); hand-written because no
maintained tool reports module cycles inside a crate (cargo-modules draws the graph but needs a
nightly rustc and does not fail on cycles).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

MAX_LINES = 500
# Files another change is splitting, with that change; the size check passes over them until it
# lands (then delete the entry: an entry for a file under the limit fails the lint).
SPLIT_ELSEWHERE: dict[str, str] = {}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text: str) -> str:
    """The source with comments, string and char literals blanked (newlines kept, so line
    numbers hold), so that braces and paths inside them are not read as code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        raw = re.match(r'b?r(#*)"', text[i : i + 260]) if c in "br" else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + raw.group(1)
            j = text.find(end, i + raw.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"' or (c == "b" and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a without a closing quote).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i : i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def matching_brace(text: str, at: int) -> int:
    """The index just past the brace that closes the one at `at`."""
    depth = 0
    for j in range(at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


TEST_ATTR = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*|any\(test[^\]]*)\)\]")


def without_test_items(code: str) -> str:
    """`code` without the items under `#[cfg(test)]` (modules, functions, uses...)."""
    while True:
        m = TEST_ATTR.search(code)
        if not m:
            return code
        start, j = m.start(), m.end()
        # The item: up to its `;`, or through its `{...}` block, whichever comes first.
        semi, brace = code.find(";", j), code.find("{", j)
        if brace >= 0 and (semi < 0 or brace < semi):
            end = matching_brace(code, brace)
        else:
            end = len(code) if semi < 0 else semi + 1
        code = code[:start] + "\n" * code.count("\n", start, end) + code[end:]


@dataclass
class Module:
    name: str  # path from the crate root, e.g. "policy::cswrr"; "" for the root
    file: str
    children: dict = field(default_factory=dict)  # name -> Module
    parent: "Module | None" = None
    code: str = ""  # without comments, strings and test items


MOD_DECL = re.compile(r"(?:#\[path\s*=\s*\"([^\"]*)\"\]\s*)?\b(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])")


def load_module(name: str, file: str, parent, test_files: set, all_modules: list) -> "Module":
    with open(file, encoding="utf-8") as f:
        text = f.read()
    plain = strip_comments_and_strings(text)
    # Test modules declared here: their files are test files.
    for m in TEST_ATTR.finditer(plain):
        decl = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", plain[m.end() :])
        if decl:
            for path in child_files(file, decl.group(1)):
                if os.path.exists(path):
                    mark_test_files(path, test_files)
    code = without_test_items(plain)
    module = Module(name=name, file=file, parent=parent, code=code)
    all_modules.append(module)
    for m in MOD_DECL.finditer(code):
        explicit, child, kind = m.group(1), m.group(2), m.group(3)
        child_name = f"{name}::{child}" if name else child
        if kind == "{":
            # An inline module: its code stays in this file's (a simplification: it is read as
            # part of its parent).
            continue
        paths = [os.path.join(os.path.dirname(file), explicit)] if explicit else child_files(file, child)
        path = next((p for p in paths if os.path.exists(p)), None)
        if path is None:
            continue
        module.children[child] = load_module(child_name, path, module, test_files, all_modules)
    return module


def child_files(file: str, child: str) -> list:
    """Where the file of module `child` declared in `file` may be."""
    base = os.path.basename(file)
    if base in ("lib.rs", "main.rs", "mod.rs"):
        folder = os.path.dirname(file)
    else:
        folder = os.path.join(os.path.dirname(file), base[:-3])
    return [os.path.join(folder, child + ".rs"), os.path.join(folder, child, "mod.rs")]


def mark_test_files(file: str, test_files: set) -> None:
    """`file` and every module file under it are test code."""
    test_files.add(os.path.abspath(file))
    with open(file, encoding="utf-8") as f:
        plain = strip_comments_and_strings(f.read())
    for m in MOD_DECL.finditer(plain):
        if m.group(3) == ";":
            for path in child_files(file, m.group(2)):
                if os.path.exists(path):
                    mark_test_files(path, test_files)


def use_paths(code: str):
    """Every path a `use` names, as lists of segments (`use a::{b, c::d}` gives a::b and a::c::d)."""
    for m in re.finditer(r"\buse\s+([^;]*);", code):
        tree = re.sub(r"\s+as\s+" + IDENT, "", m.group(1))
        yield from expand_use_tree(re.sub(r"\s+", "", tree))


def expand_use_tree(tree: str, prefix=()):
    tree = tree.lstrip(":")
    brace = tree.find("{")
    if brace < 0:
        segments = [s for s in tree.split("::") if s]
        if segments:
            yield list(prefix) + segments
        return
    head = [s for s in tree[:brace].split("::") if s]
    inner = tree[brace + 1 : tree.rfind("}")]
    depth, part, parts = 0, "", []
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        part += ch
    parts.append(part)
    for p in parts:
        if p:
            yield from expand_use_tree(p, tuple(prefix) + tuple(head))


def resolve(module: Module, segments: list, root: Module):
    """The module a path names from `module` (None: outside the crate, or not a module path)."""
    first = segments[0]
    if first == "crate":
        at, rest = root, segments[1:]
    elif first in ("super", "self"):
        at, rest = module, segments
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if at.parent is None:
                    return None
                at = at.parent
            rest = rest[1:]
    elif first in module.children:
        at, rest = module, segments
    else:
        return None
    for s in rest:
        child = at.children.get(s)
        if child is None:
            break
        at = child
    return at


def edges_of(module: Module, root: Module) -> set:
    targets = set()
    paths = list(use_paths(module.code))
    code_outside_uses = re.sub(r"\buse\s+[^;]*;", ";", module.code)
    names = ["crate", "super", "self"] + list(module.children)
    path = re.compile(r"(?<![:\w])(" + "|".join(map(re.escape, names)) + r")((?:::" + IDENT + ")+)")
    for m in path.finditer(code_outside_uses):
        paths.append([m.group(1)] + [s for s in m.group(2).split("::") if s])
    for p in paths:
        if p == ["self"]:
            continue
        target = resolve(module, p, root)
        if target is not None and target is not module:
            targets.add(target.name)
    return targets


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def one_cycle(graph: dict, component: list) -> list:
    """One closed path through a component, for the message (a -> b -> ... -> a)."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return path + [start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            # Close through the first member already on the path.
            w = next(w for w in nxt if w in seen)
            return path[path.index(w) :] + [w]
        path.append(fresh[0])
        seen.add(fresh[0])


def crate_roots(crate_dir: str) -> list:
    roots = []
    for rel in ("src/lib.rs", "src/main.rs"):
        if os.path.exists(os.path.join(crate_dir, rel)):
            roots.append(os.path.join(crate_dir, rel))
    with open(os.path.join(crate_dir, "Cargo.toml"), encoding="utf-8") as f:
        manifest = f.read()
    for m in re.finditer(r'^\s*path\s*=\s*"([^"]+\.rs)"', manifest, re.M):
        path = os.path.join(crate_dir, m.group(1))
        if os.path.exists(path) and path not in roots:
            roots.append(path)
    bins = os.path.join(crate_dir, "src", "bin")
    if os.path.isdir(bins):
        roots += sorted(os.path.join(bins, f) for f in os.listdir(bins) if f.endswith(".rs"))
    return [os.path.normpath(r) for r in roots]


def listed_files(root: str) -> list:
    out = subprocess.run(
        ["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [os.path.join(root, f) for f in out.splitlines() if os.path.exists(os.path.join(root, f))]


def check(root: str, max_lines: int) -> list:
    files = listed_files(root)
    problems = []
    crates = sorted(os.path.dirname(f) for f in files if os.path.basename(f) == "Cargo.toml")
    test_files = set()
    for crate in crates:
        for entry in crate_roots(crate):
            modules = []
            top = load_module("", entry, None, test_files, modules)
            graph = {m.name: edges_of(m, top) for m in modules}
            for component in cycles(graph):
                loop = " -> ".join(n or "(root)" for n in one_cycle(graph, component))
                rel = os.path.relpath(entry, root)
                problem = f"{rel}: import cycle between modules: {loop}"
                if len(component) > len(loop.split(" -> ")) - 1:
                    problem += f" (the knot: {', '.join(n or '(root)' for n in component)})"
                problems.append(problem)
    for f in files:
        if not f.endswith(".rs"):
            continue
        rel = os.path.relpath(f, root)
        parts = rel.split(os.sep)
        if os.path.abspath(f) in test_files or "tests" in parts[:-1] or parts[-1] == "tests.rs":
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines = sum(1 for _ in fh)
        elsewhere = SPLIT_ELSEWHERE.get(rel.replace(os.sep, "/"))
        if elsewhere and lines <= max_lines:
            problems.append(f"{rel}: {lines} lines now: delete its SPLIT_ELSEWHERE entry in tools/rust_structure.py")
        elif elsewhere:
            print(f"rust_structure: {rel} ({lines} lines) is being split on {elsewhere}; not checked", file=sys.stderr)
        elif lines > max_lines:
            problems.append(f"{rel}: {lines} lines, more than {max_lines} (split it by concept, or move its tests out)")
    return problems


def self_test() -> int:
    """Plant a cycle and a long file in a scratch crate and check that both are reported, and
    that test-only references and a clean crate are not."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "init", "-q", d], check=True)
        os.makedirs(os.path.join(d, "src", "b"))
        files = {
            "Cargo.toml": '[package]\nname = "planted"\n',
            "src/lib.rs": "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod tests;\n",
            "src/a.rs": "use crate::b::{self, inner::Thing};\npub fn f() {}\n",
            "src/b.rs": "pub mod inner;\npub fn g() { super::c::h() }\n",
            "src/b/inner.rs": "pub struct Thing;\n#[cfg(test)]\nmod t { use crate::c; }\n",
            "src/c.rs": "// crate::b in a comment is not a use\npub fn h() { let _ = \"crate::b\"; crate::a::f() }\n",
            "src/tests.rs": "use crate::a;\n" + "\n" * 600,
            "src/long.rs": "\n" * 501,
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(d, MAX_LINES)
        expected_cycle = "src/lib.rs: import cycle between modules: a -> b -> c -> a"
        expected_long = "src/long.rs: 501 lines"
        ok = (
            any(p == expected_cycle for p in found)
            and any(p.startswith(expected_long) for p in found)
            and len(found) == 2
        )
        # Without the closing edge, nothing: a comment, a string and test code do not count.
        with open(os.path.join(d, "src/c.rs"), "w", encoding="utf-8") as f:
            f.write("// crate::b in a comment\npub fn h() { let _ = \"crate::a::f\"; }\n")
        os.remove(os.path.join(d, "src/long.rs"))
        clean = check(d, MAX_LINES)
    if ok and not clean:
        print("rust_structure self-test: a planted cycle and a long file are caught; a clean crate passes")
        return 0
    print(f"rust_structure self-test FAILED: planted -> {found}; clean -> {clean}", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--max-lines", type=int, default=MAX_LINES)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.abspath(args.root), args.max_lines)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"rust_structure: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("rust_structure: no module import cycles, no non-test .rs file over", args.max_lines, "lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
