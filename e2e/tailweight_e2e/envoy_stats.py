"""Envoy's admin /stats (text form, one `name: value` a line), fetched and parsed in one place:
counters and gauges as integers; histograms (their summary lines) as text only in `parse_all`."""
import re

import requests

_INTEGER = re.compile(r"-?\d+")


def fetch(admin: str, timeout_s: float = 5.0) -> str:
    """The whole /stats text of the Envoy whose admin interface is at `admin` (http://host:port)."""
    r = requests.get(f"{admin}/stats", timeout=timeout_s)
    r.raise_for_status()
    return r.text


def parse_all(text: str) -> dict[str, str]:
    """Every stat by name, its value as text."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(": ")
        if sep:
            out[name] = value.strip()
    return out


def parse(text: str, prefix: str = "") -> dict[str, int]:
    """Counters and gauges whose names start with `prefix`."""
    return {name: int(value) for name, value in parse_all(text).items()
            if name.startswith(prefix) and _INTEGER.fullmatch(value)}


def read(admin: str, prefix: str = "") -> dict[str, int]:
    """Counters and gauges now, by name prefix."""
    return parse(fetch(admin), prefix)
