"""Registers a tool fine, then raises in another registration hook: the tool goes too."""

from lich import hookimpl, tool


@tool
def zoo_later(text: str) -> str:
    """Must be removed when the plugin fails."""
    return text


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_later)


@hookimpl
def lich_register_providers(registry):
    raise RuntimeError("fails_later could not register its providers")
