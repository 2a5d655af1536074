"""A tool that raises."""

from lich import hookimpl, tool


@tool
def zoo_raises(text: str) -> str:
    """Always fails."""
    raise ValueError(f"zoo_raises cannot handle {text!r}")


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_raises)
