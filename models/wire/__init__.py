"""What crosses the wire: the contract, spec loading, durations, sizes, retries, graphs."""
