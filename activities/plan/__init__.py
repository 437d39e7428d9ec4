"""Plan activities: progress reads, the scratchpad, update callers."""
