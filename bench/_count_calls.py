"""``python bench/_count_calls.py OUT.json (SCRIPT | -m MODULE) ARGS…``: run a Python
script (or module) in this process, as ``python SCRIPT ARGS…`` would, counting the
function calls it makes, and write the counts to ``OUT.json`` when the process exits.

Counted with :func:`sys.setprofile` (and :func:`threading.setprofile` for the threads it
starts): ``python`` is every call of a Python function and every resumption of a
generator or coroutine, ``builtin`` every call of a function written in C. The count is
the work done, not the time it took: it does not move with the machine's load. The
profile function slows the process down severalfold, so nothing here is timed.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["main"]


def main(argv: list[str]) -> None:
    module = len(argv) >= 3 and argv[1] == "-m"
    if len(argv) < 2 or (argv[1] == "-m" and not module):
        print("usage: _count_calls.py OUT.json (SCRIPT | -m MODULE) [ARGS…]", file=sys.stderr)
        raise SystemExit(2)
    out = argv[0]
    target, rest = (argv[2], argv[3:]) if module else (argv[1], argv[2:])
    # One counter pair per thread, so that no two threads update the same one.
    counters: dict[int, list[int]] = {}

    def count(frame: FrameType, event: str, arg: Any) -> None:
        mine = counters.get(threading.get_ident())
        if mine is None:
            mine = counters[threading.get_ident()] = [0, 0]
        if event == "call":
            mine[0] += 1
        elif event == "c_call":
            mine[1] += 1

    def write() -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        totals = {"python": sum(c[0] for c in counters.values()),
                  "builtin": sum(c[1] for c in counters.values())}
        with open(out, "w", encoding="utf-8") as f:
            json.dump(totals, f)

    atexit.register(write)
    sys.argv = [target, *rest]
    if not module:  # as `python SCRIPT` puts the script's folder first
        sys.path[0] = os.path.dirname(os.path.abspath(target))
    threading.setprofile(count)
    sys.setprofile(count)
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
