"""``python -m countersign_client.gateway``: the same as ``countersign-mcp-gateway``."""

from countersign_client.gateway.main import main

main()
