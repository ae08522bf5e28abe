"""What every network door shares (HTTP API, MCP over HTTP, the console, the session server)."""
