"""``python -m bench``: run the benchmarks, print their tables, write ``bench/results.json``.

    python -m bench                  # the full run (a few minutes)
    python -m bench --only b1,b3     # some of them
    python -m bench --quick          # every benchmark at a tiny size (what the smoke test runs)

Exit status 0 when every run was sane (targets may still be missed: the
summary says so), 1 when a sanity check failed (a wrong answer, a crashed
process), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._common import markdown_table
from bench._suite import SUITE, run_one

__all__ = ["main"]


def _meta() -> dict[str, Any]:
    import lich

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "lich": lich.__version__,
        "commit": commit,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": list(load),
    }


def _target_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for result in results.values():
        if not isinstance(result, dict):
            continue
        for t in result.get("targets", []):
            unit = t["unit"]
            rows.append([t["name"], f"{t['op']} {t['limit']:g} {unit}",
                         f"{t['measured']:.2f} {unit}", "met" if t["ok"] else "MISSED"])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks named by the arguments."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(SUITE))
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds, not minutes)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results.json"),
                        help="where to write the results (default: bench/results.json)")
    args = parser.parse_args(argv)
    names = [n.strip().lower() for n in args.only.split(",") if n.strip()] or list(SUITE)
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(SUITE)})")

    meta = _meta()
    meta["size"] = "quick" if args.quick else "full"
    print(f"lich {meta['lich']} ({meta['commit'] or 'no git'}) · Python {meta['python']} · "
          f"{meta['platform']} · {meta['cpus']} CPUs · load {meta['loadavg_at_start'][0]:.2f}"
          f" · {meta['size']} run\n", flush=True)
    results: dict[str, Any] = {"meta": meta}
    sane = True
    for name in names:
        started = time.perf_counter()
        result, tables = run_one(name, quick=args.quick)
        result["seconds"] = round(time.perf_counter() - started, 1)
        results[name] = result
        for title, table in tables:
            print(f"{title}\n\n{table}\n", flush=True)
        for problem in result.get("checks", []):
            sane = False
            print(f"SANITY {name}: {problem}", file=sys.stderr)
    rows = _target_rows(results)
    if rows:
        print("Targets\n")
        print(markdown_table(["target", "limit", "measured", ""], rows))
    results["seconds"] = round(sum(r.get("seconds", 0) for r in results.values()
                                   if isinstance(r, dict)), 1)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"\n{results['seconds']} s · results in {args.out}")
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
