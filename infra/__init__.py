"""Process-level plumbing shared by the worker, the CLI and the tests: logging, connection, the
embedded server."""
