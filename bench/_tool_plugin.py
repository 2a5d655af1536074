"""The trivial tool of the benchmarks, as a single-file lich plugin.

Self-contained (it imports only lich) so that a gateway process can load it
by path (``plugins = ["/…/bench/_tool_plugin.py"]``) without ``bench`` being
importable there; in process it is registered as a module object.
"""

from __future__ import annotations

from typing import Any

from lich import hookimpl, tool

__all__ = ["TOOL", "bench_echo", "echo_tool", "lich_register_tools"]

TOOL = "bench_echo"


def bench_echo(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


# A plain (sync) function, as most plugin tools are: lich runs it in a worker thread.
# Read-only (it is): the approvals plugin's default rules allow it without asking.
echo_tool = tool(name=TOOL, read_only=True)(bench_echo)


@hookimpl
def lich_register_tools(registry: Any) -> None:
    """Register the trivial tool."""
    registry.register(echo_tool)
