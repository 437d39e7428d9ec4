"""Aggregators: the spec and the pure rules of joining events."""
