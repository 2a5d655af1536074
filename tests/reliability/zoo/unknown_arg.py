"""A hook implementation that asks for an argument the spec does not have."""

from lich import hookimpl


@hookimpl
def lich_register_tools(registry, toolbox):
    return None
