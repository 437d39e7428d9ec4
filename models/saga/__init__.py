"""Sagas: the spec and the pure rules of a saga's run."""
