"""An after-hook that raises (for calls addressed to it)."""

from lich import hookimpl


@hookimpl
def lich_after_tool_call(call, result):
    if call.args.get("text") == "after_raises":
        raise RuntimeError("after_raises could not look at the result")
    return None
