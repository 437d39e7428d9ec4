"""Event Coordinator: event-driven coordination patterns (sagas, aggregators, reactive chains) as
durable Temporal workflows.

Everything the distribution installs lives under this one name, so it can sit beside a user's own
``models`` or ``workflows`` packages. In the repository the subpackages are links to the
top-level folders of the design card (README, "Layout").
"""
