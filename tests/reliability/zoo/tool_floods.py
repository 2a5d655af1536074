"""A tool whose output is 100 MB."""

from lich import hookimpl, tool


@tool
def zoo_floods(text: str) -> str:
    """Answers with 100 MB."""
    return text * (100 * 1024 * 1024 // max(1, len(text)))


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_floods)
