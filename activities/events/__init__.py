"""Event activities: delivery to workflows and the chain's lookback."""
