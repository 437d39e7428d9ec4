"""Agent work: the registry of agents and the one activity that runs any of them."""
