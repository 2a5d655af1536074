"""A before-hook that returns a string (for calls addressed to it)."""

from lich import hookimpl


@hookimpl
def lich_before_tool_call(call):
    if call.args.get("text") == "before_wrong_type":
        return "yes, go ahead"
    return None
