"""Long-running services freeze their start-up heap (``freeze_startup_heap``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .conftest import write_config


def test_the_start_up_heap_is_frozen_and_later_garbage_still_collected() -> None:
    # In a child: gc.freeze is process-wide and would keep this test process's garbage.
    code = textwrap.dedent("""
        import gc, weakref
        from lich.cli.common import freeze_startup_heap

        class Node:
            pass

        frozen = freeze_startup_heap()
        assert frozen > 1000, frozen  # lich's modules and classes at least
        assert gc.get_freeze_count() == frozen
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after the freeze
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None, "a cycle made after the freeze was not collected"
        print("ok", frozen)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


def test_the_gateway_command_freezes_before_it_serves(
    work: Path, scripted: Any, lich: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import lich.cli.common as common

    calls: list[str] = []
    monkeypatch.setattr(common, "freeze_startup_heap", lambda: calls.append("frozen") or 0)
    write_config(work, scripted().base_url, plugins=["openai_compat", "gateway"])

    result = lich("gateway", "nosuch")  # refused by run_gateway, after the freeze

    assert result.exit_code == 2, result.output
    assert calls == ["frozen"]
