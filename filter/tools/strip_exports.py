#!/usr/bin/env python3
"""Remove proxy-wasm callbacks the filter does not implement from a module's exports.

The Rust SDK exports every callback, and the host calls each exported one: a body chunk, trailers,
the end of a stream each cost a host-to-V8 round trip (~2-3 us) that only reaches the SDK's default
(continue / done). Without the export the host skips the call and takes the same default
(proxy-wasm-cpp-host checks each callback for null). wasm-opt afterwards drops the dead code.

    strip_exports.py in.wasm out.wasm name...
"""
import sys


def leb(data: bytes, i: int):
    value = shift = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def enc(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def strip(module: bytes, drop: set) -> bytes:
    if module[:4] != b"\0asm":
        raise SystemExit("not a wasm module")
    out, i, found = bytearray(module[:8]), 8, set()
    while i < len(module):
        section_id = module[i]
        size, start = leb(module, i + 1)
        body, i = module[start:start + size], start + size
        if section_id == 7:  # exports: vec(name, kind byte, index)
            count, j = leb(body, 0)
            kept = []
            for _ in range(count):
                entry = j
                n, j = leb(body, j)
                name = body[j:j + n].decode()
                _, end = leb(body, j + n + 1)
                if name in drop:
                    found.add(name)
                else:
                    kept.append(body[entry:end])
                j = end
            body = enc(len(kept)) + b"".join(kept)
        out += bytes([section_id]) + enc(len(body)) + body
    if found != drop:
        raise SystemExit(f"not exported: {sorted(drop - found)}")
    return bytes(out)


if __name__ == "__main__":
    src, dst, *names = sys.argv[1:]
    with open(src, "rb") as f:
        data = strip(f.read(), set(names))
    with open(dst, "wb") as f:
        f.write(data)
