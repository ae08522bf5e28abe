"""The repository itself: docs, README, scripts, compose files, the suite's rules."""
