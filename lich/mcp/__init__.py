"""Model Context Protocol: ``lich mcp serve`` serves lich's tools to MCP clients.

The SDK (the ``mcp`` extra) is imported only when an MCP feature is used.
"""
