"""The benchmarks, their full sizes and the tiny sizes the smoke test runs."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SUITE", "run_one"]

# name -> (module, full-size arguments, quick arguments)
SUITE: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "b1": ("bench.b1_loop", {"turns": (1, 20, 100), "reps": 11},
           {"turns": (1, 3), "reps": 1}),
    "b1cli": ("bench.b1_cli", {"turns": (1, 20, 100), "reps": 9},
              {"turns": (1, 2), "reps": 1, "warm_up": False}),
    "b1work": ("bench.b1_work", {"turns": (20, 100)},
               {"turns": (1, 2), "variants": ("raw sync", "lich", "lich --json")}),
    "b2cold": ("bench.b1_cli", {"turns": (0,), "reps": 15},
               {"turns": (0,), "reps": 1, "warm_up": False}),
    "b2": ("bench.b2_startup", {"plugins": 50, "reps": 15},
           {"plugins": 2, "reps": 1}),
    "b3": ("bench.b3_gateway", {"loads": ((1, 20), (50, 10), (500, 3)), "reps": 7},
           {"loads": ((2, 2),), "reps": 1}),
    "b4": ("bench.b4_transcripts",
           {"records": 10_000, "sessions": 1_000, "resume_messages": 10_000, "reps": 5},
           {"records": 50, "sessions": 5, "resume_messages": 50, "reps": 1}),
    "b5": ("bench.b5_memory", {"turns": 100, "reps": 3},
           {"turns": 2, "reps": 1}),
    "b6": ("bench.b6_telemetry", {"turns": 100, "reps": 9},
           {"turns": 2, "reps": 1}),
    "b7": ("bench.b7_mcp", {"calls": 100, "reps": 9},
           {"calls": 3, "reps": 1}),
    "b8": ("bench.b8_plugins", {"turns": 100, "reps": 21},
           {"turns": 3, "reps": 2}),
    "b9": ("bench.b9_cluster", {"k": 50, "m": 10, "reps": 3},
           {"k": 2, "m": 2, "reps": 1, "partitions": 4}),
    "b10": ("bench.b10_checkpoints", {"files": 10_000, "changed": 100, "reps": 5},
            {"files": 50, "changed": 5, "reps": 1}),
}


def run_one(name: str, *, quick: bool = False) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Run benchmark ``name``; returns its results and its (title, table) pairs."""
    module_name, full, small = SUITE[name]
    module = importlib.import_module(module_name)
    result: dict[str, Any] = module.run(**(small if quick else full))
    return result, module.tables(result)
