"""Real surehand processes: workers, beat, up, api, flower on real brokers."""
