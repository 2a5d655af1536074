"""A second plugin named good_tools: skipped as a duplicate plugin name."""

from lich import hookimpl, tool


@tool
def zoo_echo(text: str) -> str:
    """Say the text back."""
    return f"second echo: {text}"


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_echo)
