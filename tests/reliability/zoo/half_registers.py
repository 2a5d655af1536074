"""Registers one tool, then raises: nothing of it may stay."""

from lich import hookimpl, tool


@tool
def zoo_half(text: str) -> str:
    """Must never be offered to a model."""
    return text


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_half)
    raise RuntimeError("half_registers gave up after registering zoo_half")
