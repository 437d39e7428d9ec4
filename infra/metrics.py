"""The worker's Prometheus endpoint: the SDK runtime's own exporter (`PrometheusConfig`), which
serves the SDK's `temporal_*` metrics and the product's (the catalogue, coord.models.ops.metrics)
at `http://<bind>:<port>/metrics`.

A runtime belongs to a process: a worker makes its own (never the SDK's global default), so a
test or a bench running workers of both kinds in one process gives each its own."""

import ipaddress
import os
from dataclasses import dataclass

from temporalio.runtime import PrometheusConfig

from coord.models.ops.metrics import prometheus_buckets
from coord.models.wire.specs import SpecError

PORT_ENV = "COORD_METRICS_PORT"
BIND_ENV = "COORD_METRICS_BIND"
DEFAULT_BIND = "127.0.0.1"
"""Only this host by default: the endpoint has no authentication, and what it shows (agents,
topics, event types) is the deployment's business. A container that Prometheus scrapes binds
0.0.0.0 (`COORD_METRICS_BIND`, as docker-compose.yml sets it)."""


@dataclass(frozen=True)
class MetricsEndpoint:
    port: int
    bind: str = DEFAULT_BIND

    @classmethod
    def of(cls, port: int | None, bind: str | None = None) -> "MetricsEndpoint | None":
        """From `--metrics-port`/`--metrics-bind`, else $COORD_METRICS_PORT/$COORD_METRICS_BIND;
        None (no endpoint) without a port. Raises SpecError naming the option."""
        if port is None:
            port = _env_port()
        if port is None:
            if bind is not None:
                raise SpecError("--metrics-bind: no port to serve metrics on (--metrics-port)")
            return None
        bind = bind or os.environ.get(BIND_ENV) or DEFAULT_BIND
        if not 0 < port < 65536:
            raise SpecError(f"--metrics-port: {port} is not a port (1 to 65535)")
        try:
            ipaddress.ip_address(bind)
        except ValueError:
            raise SpecError(
                f"--metrics-bind: {bind!r} is not an IP address (127.0.0.1 for this host only, "
                "0.0.0.0 for every interface)"
            ) from None
        return cls(port, bind)

    @property
    def address(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def prometheus(self) -> PrometheusConfig:
        """Durations in seconds; counters keep their names as created (the catalogue's end in
        `_total`, the SDK's keep the names its dashboards query); the catalogue's buckets."""
        return PrometheusConfig(
            bind_address=self.address,
            counters_total_suffix=False,
            durations_as_seconds=True,
            histogram_bucket_overrides=prometheus_buckets(),
        )

    def refused(self, error: Exception) -> SpecError:
        """Why the runtime could not serve the endpoint (the port taken), naming the option."""
        return SpecError(f"--metrics-port {self.port}: cannot serve metrics at {self.url}: {error}")


def _env_port() -> int | None:
    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SpecError(f"${PORT_ENV}: {raw!r} is not a port number") from None
