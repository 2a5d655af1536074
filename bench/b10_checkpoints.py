"""B10 — checkpoints: what a snapshot of the work dir costs the shadow store.

A tree of F files (100 per directory, a few hundred bytes each) is snapshotted
once (the first snapshot hashes every file), then:

* **unchanged** — a snapshot of the same tree (git's stat data says nothing
  changed: the cost every later turn pays);
* **C changed** — a snapshot after C files were rewritten;
* **rewind plan + restore** — what ``lich rewind`` does for those C files
  (ledger plan from the two snapshots, then the restore).

The issue's targets (#33.5): unchanged ≤ 50 ms, 100 changed ≤ 200 ms, at 10,000
files "on this machine"; they are reported, and a miss says so.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import Target, fmt_ms, markdown_table, summary

__all__ = ["run", "tables"]


def _tree(root: Path, files: int) -> list[Path]:
    paths = []
    for i in range(files):
        d = root / f"d{i // 100:03d}"
        d.mkdir(exist_ok=True)
        path = d / f"f{i % 100:02d}.txt"
        path.write_text(f"file {i}\n" * 40)
        paths.append(path)
    return paths


def run(files: int = 10_000, changed: int = 100, reps: int = 5) -> dict[str, Any]:
    """Run B10 and return its results (JSON-able)."""
    from lich.checkpoints.ledger import Checkpoint, plan_rewind
    from lich.checkpoints.store import ShadowStore

    out: dict[str, Any] = {"params": {"files": files, "changed": changed, "reps": reps},
                           "checks": []}
    unchanged_s: list[float] = []
    changed_s: list[float] = []
    rewind_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lich-bench-b10-") as tmp:
        root = Path(tmp)
        paths = _tree(root, files)
        store = ShadowStore(root, max_file_bytes=1 << 20)
        started = time.perf_counter()
        store.snapshot("bench", {"session_id": "bench"})
        first_s = time.perf_counter() - started
        for rep in range(reps):
            # The previous rep's rewind changed the tree back: that snapshot is not timed.
            if rep:
                store.snapshot("bench", {"session_id": "bench"})
            started = time.perf_counter()
            same = store.snapshot("bench", {"session_id": "bench"})
            unchanged_s.append(time.perf_counter() - started)
            if same.changed:
                out["checks"].append(f"unchanged: {len(same.changed)} paths changed")
            for path in paths[:changed]:
                path.write_text(f"rep {rep}\n")
            started = time.perf_counter()
            after = store.snapshot("bench", {"session_id": "bench"})
            changed_s.append(time.perf_counter() - started)
            if len(after.changed) != changed:
                out["checks"].append(f"changed: {len(after.changed)} paths, expected {changed}")

            def point(snap: Any, phase: str) -> Checkpoint:
                return Checkpoint(snap.id, snap.commit, phase, "r", 1, None, None, str(root),
                                  snap.changed, snap.skipped, None)

            started = time.perf_counter()
            points = [point(same, "before"), point(after, "after")]
            plan = plan_rewind(store, points, points[0], after.commit)
            store.restore(same.commit, plan.write, plan.delete)
            rewind_s.append(time.perf_counter() - started)
            if len(plan.write) != changed or paths[0].read_text() != "file 0\n" * 40:
                out["checks"].append(f"rewind: wrote {len(plan.write)} files, expected {changed}")
    out["first_s"] = first_s
    out["unchanged_s"] = summary(unchanged_s)
    out["changed_s"] = summary(changed_s)
    out["rewind_s"] = summary(rewind_s)
    out["targets"] = [
        Target(f"B10 unchanged {files}-file tree", "<=", 50.0,
               out["unchanged_s"]["median"] * 1000, "ms").as_dict(),
        Target(f"B10 {changed} of {files} files changed", "<=", 200.0,
               out["changed_s"]["median"] * 1000, "ms").as_dict(),
    ] if files >= 10_000 else []
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    p = result["params"]
    head = ["snapshot", "files", "ms (median)"]
    body = [
        ["first (hashes every file)", str(p["files"]), fmt_ms(result["first_s"], 1)],
        ["unchanged tree", str(p["files"]), fmt_ms(result["unchanged_s"]["median"], 1)],
        [f"{p['changed']} files changed", str(p["files"]),
         fmt_ms(result["changed_s"]["median"], 1)],
        [f"rewind of {p['changed']} files (plan + restore)", str(p["files"]),
         fmt_ms(result["rewind_s"]["median"], 1)],
    ]
    return [(f"B10 checkpoints — medians of {p['reps']} runs", markdown_table(head, body))]
