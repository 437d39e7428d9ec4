"""Coordinator mode: the plan's graph, its tasks, gates and scratchpad."""
