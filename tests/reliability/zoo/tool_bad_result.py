"""A raw Tool whose function returns a dict instead of a ToolResult."""

from lich import Tool, hookimpl


def _execute(args, ctx):
    return {"ok": True, "output": "a dict is not a ToolResult"}


zoo_bad_result = Tool(
    name="zoo_bad_result",
    description="Returns the wrong type.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    execute=_execute,
)


@hookimpl
def lich_register_tools(registry):
    registry.register(zoo_bad_result)
