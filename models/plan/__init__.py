"""Plans (coordinator mode): the spec, the task graph's model, gates, votes, the report."""
