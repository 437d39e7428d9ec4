"""Votes: the spec and the tally."""
