"""Requester grants: who may query the MCP server, as which Slack user (docs/mcp.md)."""
