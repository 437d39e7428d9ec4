"""The agent mesh: the agent SDK, declarations, the ledger, breakers, routing, health."""
