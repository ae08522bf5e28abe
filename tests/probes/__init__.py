"""Probes: the registry, admission asking them, the built-in git and HTTP probes."""
