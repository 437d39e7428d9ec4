"""`coord dashboard`: the seed's event-system dashboard, read from the workers' metrics (a
Prometheus server, or the workers' endpoints) and the Temporal server, drawn in the terminal
(`terminal.py`) or served as a web page (`web.py`). The arithmetic is models/ops/dashboard.py."""
