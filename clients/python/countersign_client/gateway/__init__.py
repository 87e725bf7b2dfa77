"""``countersign-mcp-gateway``: an MCP server in front of other MCP servers, whose gated tools
run only once a person approves the call in Countersign (``countersign-client[mcp]``).

:mod:`.config` reads ``gateway.yml``, :mod:`.upstreams` connects the upstream servers and routes
tool names, :mod:`.gate` asks for, waits on and runs a gated call, :mod:`.server` serves it all
on stdio or Streamable HTTP, :mod:`.main` is the command. See docs/mcp-gateway.md.
"""
