"""The console in a real headless Chromium."""
