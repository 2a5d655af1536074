"""MCP: tools from any Model Context Protocol server as lich tools.

The builtin plugin ``mcp`` (:mod:`lich.mcp.plugin`, entry point ``mcp``) starts
the servers of ``[mcp.servers.<name>]`` (:mod:`lich.mcp.config`), registers their
tools as ``mcp__<server>__<tool>`` (:mod:`lich.mcp.naming`, :mod:`lich.mcp.tools`)
and closes them with the agent (``lich_shutdown``). The SDK (``pip install
'lich-agent[mcp]'``) is imported only when a server is configured. ``lich mcp``
(:mod:`lich.mcp.command`) lists the servers and imports ``.mcp.json`` files.
See ``docs/mcp.md``.
"""
