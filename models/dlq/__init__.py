"""The dead-letter queue: letters, their states and replay rules."""
