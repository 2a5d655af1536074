"""Implements a hook that does not exist (a typo of lich_register_tools)."""

from lich import hookimpl


@hookimpl
def lich_register_tool(registry):
    return None
