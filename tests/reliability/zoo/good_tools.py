"""The healthy plugin of the zoo: ``zoo_echo(text)``."""

from lich import hookimpl, tool


@tool
def zoo_echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_echo)
