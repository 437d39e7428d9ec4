"""The one home of the payloads that workflows, activities, the CLI and the API exchange."""
