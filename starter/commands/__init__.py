"""The `coord` commands, one module per command group; `starter/cli.py` assembles them and
`common.py` holds what they share."""
