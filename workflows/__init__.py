"""Durable coordination patterns. Workflow code here is deterministic: no I/O, no wall clock."""
