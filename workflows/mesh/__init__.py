"""The agent mesh's long-lived workflows: the ledger and the health monitor."""
