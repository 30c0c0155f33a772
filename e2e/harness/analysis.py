"""Pure post-processing of one policy's samples: per-endpoint rates and shares over time, overall
shares, and how long a share took to settle after an event (measured as the simulator does: the
numbers in sim/settle-analysis.json, `SETTLE`)."""
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import pairwise

from tailweight_e2e import paths

Sample = tuple[float, list[float]]  # (seconds since the recorded part began, requests_total per backend)


@dataclass(frozen=True)
class Settle:
    """sim/settle-analysis.json's numbers (its description says what each does)."""
    sample_s: float
    share_window_s: float
    final_window_s: float
    before_window_s: float
    band: float


SETTLE = Settle(**{f.name: float(json.loads((paths.REPO / "sim" / "settle-analysis.json").read_text())[f.name])
                   for f in fields(Settle)})


def rates(samples: Sequence[Sample]) -> tuple[list[float], list[list[float]]]:
    """Per-interval requests/s per backend, stamped with each interval's end time."""
    times, out = [], []
    for (t0, c0), (t1, c1) in pairwise(samples):
        dt = t1 - t0
        if dt <= 0:
            continue
        times.append(t1)
        out.append([(b - a) / dt for a, b in zip(c0, c1, strict=True)])
    return times, out


def windowed_shares(samples: Sequence[Sample], window_s: float) -> tuple[list[float], list[list[float]]]:
    """At every sample time t >= window_s: each backend's share of the requests in (t - window_s, t]."""
    times, shares = [], []
    j = 0
    for t, counts in samples:
        while j < len(samples) and samples[j][0] < t - window_s - 1e-9:
            j += 1
        if j >= len(samples) or samples[j][0] > t - window_s + 0.25 * window_s or samples[j][0] >= t:
            continue  # not enough history for a full window yet
        base = samples[j][1]
        diff = [b - a for a, b in zip(base, counts, strict=True)]
        total = sum(diff)
        if total > 0:
            times.append(t)
            shares.append([d / total for d in diff])
    return times, shares


def overall_shares(samples: Sequence[Sample]) -> list[float]:
    if len(samples) < 2:
        return []
    diff = [b - a for a, b in zip(samples[0][1], samples[-1][1], strict=True)]
    total = sum(diff)
    return [d / total if total else 0.0 for d in diff]


def share_between(samples: Sequence[Sample], backend: int, t0: float, t1: float) -> float | None:
    """`backend`'s share of the requests served between t0 and t1: from the last sample at or before
    t0 to the later sample nearest t1 (samples come every 0.5 s, an event fires right after one).
    None when no request falls in between."""
    before = [k for k, (t, _) in enumerate(samples) if t <= t0 + 1e-9]
    if not before:
        return None
    start = before[-1]
    later = range(start + 1, len(samples))
    if not later:
        return None
    end = min(later, key=lambda k: abs(samples[k][0] - t1))
    diff = [b - a for a, b in zip(samples[start][1], samples[end][1], strict=True)]
    total = sum(diff)
    return diff[backend] / total if total > 0 else None


def settle_time(times: Sequence[float], share: Sequence[float], event_s: float,
                final_window_s: float = SETTLE.final_window_s, tolerance: float = SETTLE.band,
                before_window_s: float = SETTLE.before_window_s) -> dict[str, float | None]:
    """Seconds from `event_s` until `share` stays near its final value for good.

    final = mean share over the last `final_window_s`; before = mean over `before_window_s` before the
    event. Two bands, both reported:
    - settle_s: within tolerance x max(|before - final|, final) of final (a share of the step, the
      usual settling time, robust when the final share is near zero where Poisson noise is larger
      than that share of it; the final share when the step is smaller, so "no change" settles at once);
    - settle_share_s: within tolerance x final (the simulator's `settle_s`).
    None when the share is still outside the band at the last sample or nothing follows the event."""
    empty = {"settle_s": None, "settle_share_s": None, "before_share": None, "final_share": None}
    if not times:
        return empty
    end = times[-1]
    final_vals = [s for t, s in zip(times, share, strict=True) if t >= end - final_window_s and t > event_s]
    before_vals = [s for t, s in zip(times, share, strict=True) if event_s - before_window_s <= t <= event_s]
    if not final_vals:
        return empty
    final = sum(final_vals) / len(final_vals)
    before = sum(before_vals) / len(before_vals) if before_vals else None
    after = [(t, s) for t, s in zip(times, share, strict=True) if t > event_s]

    def settled_after(band: float) -> float | None:
        last_out = None
        for i, (_, s) in enumerate(after):
            if abs(s - final) > band:
                last_out = i
        if last_out is None:
            return 0.0  # inside the band from the first window after the event
        if last_out == len(after) - 1:
            return None
        return after[last_out + 1][0] - event_s

    return {
        "settle_s": settled_after(tolerance * max(abs(before - final), final)) if before is not None else None,
        "settle_share_s": settled_after(tolerance * final),
        "before_share": before,
        "final_share": final,
    }
