#!/usr/bin/env python3
"""Where a Wasm module's bytes go: its sections, and its code by Rust module.

    python3 tools/wasm_size.py MODULE.wasm [--top N]

MODULE must keep its `name` section (cargo's output, or wasm-opt run with -g: `make wasm-size`
does that, so the code sizes are those of the shipped module). Each function's body is charged to
the first `tailweight_<crate>::<module>` its demangled name mentions (drop glue and generic std
code instantiated for a project type count as that type's module), else to the library it comes
from (core, alloc, std, hashbrown, dlmalloc...). The exported entry points (`proxy_on_*`) are
charged to themselves: link-time optimisation inlines into them what only they call (e.g.
`proxy_on_configure` holds the configuration parser).
"""

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

SECTION_NAMES = {0: "custom", 1: "type", 2: "import", 3: "function", 4: "table", 5: "memory",
                 6: "global", 7: "export", 8: "start", 9: "element", 10: "code", 11: "data",
                 12: "data count"}
LEGACY_ESCAPES = {"$LT$": "<", "$GT$": ">", "$u20$": " ", "$C$": ",", "$RF$": "&", "$BP$": "*",
                  "$u7b$": "{", "$u7d$": "}", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$SP$": "@",
                  "$u3b$": ";", "$u21$": "!", "$u22$": '"', "$LP$": "(", "$RP$": ")"}


class Module:
    """The sections of a Wasm binary, its function bodies' sizes and their names."""

    def __init__(self, data: bytes):
        if data[:4] != b"\0asm":
            raise ValueError("not a Wasm module (no \\0asm magic)")
        self.sections: list[tuple[str, int]] = []
        self.body_sizes: list[int] = []
        self.names: dict[int, str] = {}
        self.imported_functions = 0
        pos = 8
        while pos < len(data):
            section_id = data[pos]
            size, pos = leb128(data, pos + 1)
            end = pos + size
            name = SECTION_NAMES.get(section_id, f"id {section_id}")
            if section_id == 0:
                length, at = leb128(data, pos)
                custom = data[at:at + length].decode("utf-8", "replace")
                name = f"custom {custom}"
                if custom == "name":
                    self._read_names(data, at + length, end)
            elif section_id == 2:
                self._count_imported_functions(data, pos)
            elif section_id == 10:
                self._read_bodies(data, pos)
            self.sections.append((name, size))
            pos = end

    def _count_imported_functions(self, data: bytes, pos: int) -> None:
        count, pos = leb128(data, pos)
        for _ in range(count):
            for _field in range(2):
                length, pos = leb128(data, pos)
                pos += length
            kind = data[pos]
            pos += 1
            if kind == 0:
                _, pos = leb128(data, pos)
                self.imported_functions += 1
            elif kind == 1:
                pos += 1
                flags = data[pos]
                _, pos = leb128(data, pos + 1)
                if flags & 1:
                    _, pos = leb128(data, pos)
            elif kind == 2:
                flags = data[pos]
                _, pos = leb128(data, pos + 1)
                if flags & 1:
                    _, pos = leb128(data, pos)
            else:
                pos += 2

    def _read_bodies(self, data: bytes, pos: int) -> None:
        count, pos = leb128(data, pos)
        for _ in range(count):
            size, after = leb128(data, pos)
            self.body_sizes.append(size + (after - pos))
            pos = after + size

    def _read_names(self, data: bytes, pos: int, end: int) -> None:
        while pos < end:
            kind = data[pos]
            size, pos = leb128(data, pos + 1)
            sub_end = pos + size
            if kind == 1:
                count, pos = leb128(data, pos)
                for _ in range(count):
                    index, pos = leb128(data, pos)
                    length, pos = leb128(data, pos)
                    self.names[index] = data[pos:pos + length].decode("utf-8", "replace")
                    pos += length
            pos = sub_end

    def functions(self) -> list[tuple[int, str]]:
        """(body bytes, name) of each function defined in the module."""
        return [(size, self.names.get(self.imported_functions + i, f"function {i}"))
                for i, size in enumerate(self.body_sizes)]


def leb128(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 number at `pos`, and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def demangle(name: str) -> str:
    """Rust's legacy mangling (`_ZN..E`) as a path; v0 names (`_R..`) as their identifiers joined
    by `::` (enough to find the crate and module)."""
    if name.startswith("_ZN") and name.endswith("E"):
        parts, pos, body = [], 0, name[3:-1]
        while pos < len(body) and body[pos].isdigit():
            digits = re.match(r"\d+", body[pos:]).group()
            pos += len(digits)
            parts.append(body[pos:pos + int(digits)])
            pos += int(digits)
        text = "::".join(p for p in parts if not re.fullmatch(r"h[0-9a-f]{16}", p))
        for escape, char in LEGACY_ESCAPES.items():
            text = text.replace(escape, char)
        return text.replace("..", "::")
    if name.startswith("_R"):
        return "::".join(re.findall(r"\d+_?([A-Za-z_][A-Za-z0-9_]*)", name))
    return name


def owner(name: str) -> str:
    """The Rust module a function's bytes are charged to (see the module doc)."""
    if name.startswith("proxy_on_") or name == "_initialize":
        return f"(export) {name}"
    path = demangle(name)
    project = re.search(r"(tailweight_\w+)::(\w+)", path)
    if project:
        return f"{project.group(1)}::{project.group(2)}"
    if name.startswith("_R"):
        crate = re.search(r"C(?:s[0-9A-Za-z]*_)?\d+([A-Za-z_]\w*?)(?=\d|$)", name)
        return crate.group(1).lstrip("_") if crate else "(other Rust)"
    if name.startswith("_ZN"):
        library = re.match(r"_?<?&?(\w+)", path)
        generic = not library or library.group(1) in ("T", "_")
        return "core (generic, for a type not named)" if generic else library.group(1)
    return "(unmangled: compiler-rt and libm builtins)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("--shipped", type=Path, help="the same module as shipped (no name section)")
    parser.add_argument("--top", type=int, default=15, help="largest functions to list (0: none)")
    args = parser.parse_args()
    try:
        module = Module(args.module.read_bytes())
    except (OSError, ValueError, IndexError) as e:
        print(f"cannot read {args.module}: {e}", file=sys.stderr)
        return 1
    if not module.names:
        print(f"{args.module} has no name section: build it with wasm-opt -g (make wasm-size)", file=sys.stderr)
        return 1
    named = args.module.stat().st_size
    print(f"# Where the filter module's bytes go\n\n{args.module}: {named:,} bytes with its name section")
    if args.shipped:
        print(f"; as shipped ({args.shipped}, no names): {args.shipped.stat().st_size:,} bytes")
    print("\n| section | bytes |\n| --- | ---: |")
    for name, size in module.sections:
        print(f"| {name} | {size:,} |")
    functions = module.functions()
    by_owner = Counter()
    for size, name in functions:
        by_owner[owner(name)] += size
    print(f"\n| code by Rust module ({len(functions)} functions) | bytes | share of code |\n| --- | ---: | ---: |")
    code = sum(by_owner.values())
    for name, size in by_owner.most_common():
        print(f"| {name} | {size:,} | {100 * size / code:.1f}% |")
    if args.top:
        print("\n| largest functions | bytes |\n| --- | ---: |")
        for size, name in sorted(functions, reverse=True)[:args.top]:
            print(f"| {demangle(name)[:110]} | {size:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
