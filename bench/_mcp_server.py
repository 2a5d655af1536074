"""The MCP server B7 calls: one ``echo`` tool over stdio, built on the SDK."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

app = MCPServer("bench")


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def echo(text: str) -> str:
    """Echo the text back."""
    return text


if __name__ == "__main__":
    app.run("stdio")
