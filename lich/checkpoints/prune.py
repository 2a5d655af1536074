"""Pruning the shadow store: which sessions' chains go, then a real garbage collection.

A chain goes when its session is named, when its session is no longer in the
session store (``lich sessions rm``/``prune``), when it is a scratch chain (a dry
run's, a diff's), or when its latest snapshot is older than ``max_age_days``; then,
while the store is bigger than ``max_store_mb``, the chain with the oldest latest
snapshot goes, one at a time. Each round ends with ``git gc --prune=now``, so what
no chain holds is deleted from disk, not only forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from attrs import frozen

from lich.checkpoints.store import Chain, ShadowStore

__all__ = ["Pruned", "prune"]


@frozen
class Pruned:
    """What a prune dropped (each chain with why), and the store's size before and after
    (``after`` is ``None`` for a dry run)."""

    dropped: tuple[tuple[Chain, str], ...]
    before: int
    after: int | None


def prune(shadow: ShadowStore, sessions: Collection[str], *, session: str | None = None,
          max_age_s: float | None = None, max_store_bytes: int | None = None,
          dry_run: bool = False, now: float | None = None) -> Pruned:
    """Drop chains by the rules of the module docstring; ``sessions`` are the ids the
    session store holds; ``session`` names the one session to drop instead.

    A dry run reports the rule-based drops only: which chains a size cap would take
    depends on what the collection frees.
    """
    now = time.time() if now is None else now
    chains = shadow.chains()
    before = shadow.size()
    dropped: list[tuple[Chain, str]] = []
    for chain in chains:
        base = chain.session_id.split("#", 1)[0]
        if session is not None:
            if base == session:
                dropped.append((chain, "named"))
        elif "#" in chain.session_id:
            dropped.append((chain, "scratch"))
        elif chain.session_id not in sessions:
            dropped.append((chain, "session_removed"))
        elif max_age_s is not None and now - chain.latest > max_age_s:
            dropped.append((chain, "older_than"))
    if dry_run:
        return Pruned(tuple(dropped), before, None)
    shadow.drop(c.ref for c, _ in dropped)
    after = shadow.collect() if chains else before
    if session is None and max_store_bytes is not None:
        gone = {c.ref for c, _ in dropped}
        left = [c for c in chains if c.ref not in gone]  # oldest first
        while after > max_store_bytes and left:
            oldest = left.pop(0)
            shadow.drop([oldest.ref])
            dropped.append((oldest, "store_size"))
            after = shadow.collect()
    return Pruned(tuple(dropped), before, after)
