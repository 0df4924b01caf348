"""Helpers shared by test modules in more than one folder (fixtures shared by all live in tests/conftest.py)."""
