"""How users drive the coordinator: the `coord` CLI and the Python API it is built on."""
