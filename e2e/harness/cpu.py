"""CPU time of processes from /proc/<pid>/stat (utime + stime), including a not yet reaped process."""
import os

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS  # fields 14 and 15 of proc(5)
    except (IndexError, ValueError):
        return None
