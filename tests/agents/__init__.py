"""Agent runtimes: command agents, the sandbox and network, the real agent CLIs."""
