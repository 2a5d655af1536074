"""A (sync) before-hook that blocks its thread for an hour (for calls addressed to it)."""

import time

from lich import hookimpl


@hookimpl
def lich_before_tool_call(call):
    if call.args.get("text") == "before_hangs":
        time.sleep(3600)
    return None
