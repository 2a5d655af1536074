"""What every benchmark shares: summaries of samples, memory readings, tables, targets."""

from __future__ import annotations

import os
import resource
import statistics
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "Target",
    "cpu_seconds",
    "fmt_kib",
    "fmt_ms",
    "fmt_ratio",
    "fmt_spread",
    "markdown_table",
    "percentile",
    "rss_kib",
    "summary",
]


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """``{"median", "min", "max", "n"}`` of ``samples`` (seconds, ratios, whatever they are)."""
    if not samples:
        raise ValueError("no samples")
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0–100) of ``samples``, nearest-rank (no interpolation)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]


def rss_kib(pid: int | str = "self") -> dict[str, int]:
    """``{"rss", "peak"}`` of a process in KiB, from ``/proc/<pid>/status`` (VmRSS, VmHWM).

    Falls back to ``resource.getrusage`` (peak only) for this process where
    ``/proc`` is not available.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {
            "rss": int(fields["VmRSS"].split()[0]),
            "peak": int(fields["VmHWM"].split()[0]),
        }
    except (OSError, KeyError, ValueError):
        if pid not in ("self", os.getpid()):
            raise
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if sys.platform == "darwin":  # bytes there, KiB on Linux
            peak //= 1024
        return {"rss": peak, "peak": peak}


def cpu_seconds(pid: int | str = "self") -> float:
    """CPU time (user + system) a process has used so far, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5), counted after the ")" from 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Target:
    """One stated target, checked against its measurement.

    ``op`` is ``"<="`` or ``">="``; ``measured`` the value compared (a ratio,
    milliseconds …); ``unit`` how to print both.
    """

    def __init__(
        self, name: str, op: str, limit: float, measured: float, unit: str = "×", note: str = ""
    ) -> None:
        if op not in ("<=", ">="):
            raise ValueError(f"op must be <= or >=, got {op!r}")
        self.name = name
        self.op = op
        self.limit = limit
        self.measured = measured
        self.unit = unit
        self.note = note

    @property
    def ok(self) -> bool:
        """Whether the measurement meets the target."""
        if self.op == "<=":
            return self.measured <= self.limit
        return self.measured >= self.limit

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able record of the check."""
        return {
            "name": self.name,
            "op": self.op,
            "limit": self.limit,
            "measured": self.measured,
            "unit": self.unit,
            "ok": self.ok,
            "note": self.note,
        }


def fmt_ms(seconds: float, digits: int = 2) -> str:
    """Seconds as milliseconds."""
    return f"{seconds * 1000:.{digits}f}"


def fmt_ratio(value: float) -> str:
    """A ratio, two decimals."""
    return f"{value:.2f}"


def fmt_spread(s: dict[str, Any], fmt: Any = fmt_ms) -> str:
    """``median (min–max)`` of a :func:`summary`, each through ``fmt``."""
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def fmt_kib(kib: float) -> str:
    """KiB as MiB, one decimal."""
    return f"{kib / 1024:.1f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table, padded so that it also reads well as plain text."""
    body = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(cells)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(list(headers)), rule, *(line(r) for r in body)])
