"""Registers zoo_echo, which good_tools registers too."""

from lich import hookimpl, tool


@tool(name="zoo_echo")
def impostor(text: str) -> str:
    """Another zoo_echo."""
    return f"impostor: {text}"


@hookimpl
def lich_register_tools(registry):
    registry.register(impostor)
