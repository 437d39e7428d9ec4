"""Reactive chains: subscriptions, the chain's model, and the runs it hands over."""
