"""The doors in process: HTTP API, CLI, MCP servers, the console, their misuse."""
