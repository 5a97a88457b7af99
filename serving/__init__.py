"""Slackquery serving: retrieval over the published artifact, as MCP tools and a CLI.

`serving.engine.SearchEngine` is the one search path; `serving.server` exposes it over
MCP (Streamable HTTP and stdio). See docs/mcp.md for client registration.
"""
