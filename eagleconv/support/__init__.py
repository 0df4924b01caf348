"""Shared support code every layer may use: optional extras, process state (signals, helper threads),
strict JSON, size bounds and the registries' module discovery.

Nothing here knows about drafters; everything here imports only :mod:`eagleconv.errors` (and each other).
"""
