"""A tool that blocks its worker thread for an hour (its timeout is 1 s)."""

import time

from lich import hookimpl, tool


@tool(timeout_s=1)
def zoo_hangs(text: str) -> str:
    """Never returns in time."""
    time.sleep(3600)
    return text


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_hangs)
