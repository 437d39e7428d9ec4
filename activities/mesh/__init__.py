"""The run of an agent on the worker side: pools, breakers, routing, results, reports."""
