"""The reactive chain and the runs it hands over."""
