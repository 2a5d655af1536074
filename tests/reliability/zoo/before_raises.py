"""A before-hook that raises (for calls addressed to it)."""

from lich import hookimpl


@hookimpl
def lich_before_tool_call(call):
    if call.args.get("text") == "before_raises":
        raise RuntimeError("before_raises refuses to decide")
    return None
