"""Helpers and fixtures more than one test module uses (fixtures reach tests through
``tests/conftest.py``; no test module imports another)."""
