"""What every pattern's workflow shares: the agent-run path, arguments, fan-outs."""
