"""An async before-hook that awaits for an hour (for calls addressed to it)."""

import asyncio

from lich import hookimpl


@hookimpl
async def lich_before_tool_call(call):
    if call.args.get("text") == "before_hangs_async":
        await asyncio.sleep(3600)
    return None
