"""The dashboard as a web page: one small aiohttp server that reads a frame every interval (one
reader, however many pages are open) and keeps a bounded history of it for the charts. The page
fetches `/api/dashboard` as JSON and redraws itself; its chart library (uPlot, MIT, vendored in
`static/` with its licence) is served from the package, so nothing is fetched from elsewhere."""

import asyncio
import contextlib
import errno
from collections import deque
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import typer
from aiohttp import web
from pydantic import BaseModel

from coord.infra.logs import get_logger
from coord.models.ops.dashboard import Snapshot
from coord.models.wire.specs import SpecError
from coord.starter.dashboard.collect import Dashboard

STATIC = Path(__file__).parent / "static"
HISTORY = 720
"""Points each chart keeps: an hour at the default 5 s interval."""
log = get_logger("coord.dashboard")
PORT_ERRORS = frozenset({errno.EADDRINUSE, errno.EACCES})


class Point(BaseModel):
    """One point of the charts."""

    at: datetime
    published_per_s: float
    consumed_per_s: float
    failed_per_s: float
    lag: int | None
    latency_ms: float | None


class Page(BaseModel):
    """What `/api/dashboard` answers: the latest frame and the charts' history."""

    interval: float
    frame: Snapshot
    history: list[Point]


def point_of(frame: Snapshot) -> Point:
    return Point(
        at=frame.at,
        published_per_s=frame.rates.published,
        consumed_per_s=frame.rates.consumed,
        failed_per_s=frame.rates.failed,
        lag=frame.health.lag,
        latency_ms=frame.health.latency_ms,
    )


class Frames:
    """The latest frame and the history, refreshed by one task."""

    def __init__(self, dashboard: Dashboard, interval: float) -> None:
        self.dashboard = dashboard
        self.interval = interval
        self.history: deque[Point] = deque(maxlen=HISTORY)
        self.latest: Snapshot | None = None

    async def refresh(self) -> None:
        self.latest = await self.dashboard.frame()
        self.history.append(point_of(self.latest))

    async def keep_refreshing(self) -> None:
        """A frame that fails unexpectedly is logged and the next one tried: the page keeps
        showing the last frame, with its time, rather than the server going away."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception:
                log.exception("dashboard frame failed")

    def page(self) -> Page:
        assert self.latest is not None, "the first frame is read before serving"
        return Page(interval=self.interval, frame=self.latest, history=list(self.history))


FRAMES = web.AppKey("frames", Frames)
NO_CACHE = {"Cache-Control": "no-store"}


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers=NO_CACHE)


async def api(request: web.Request) -> web.Response:
    page = request.app[FRAMES].page()
    return web.Response(
        text=page.model_dump_json(), content_type="application/json", headers=NO_CACHE
    )


def application(frames: Frames) -> web.Application:
    app = web.Application()
    app[FRAMES] = frames
    app.router.add_get("/", index)
    app.router.add_get("/api/dashboard", api)
    app.router.add_static("/static/", STATIC)
    app.cleanup_ctx.append(refreshing)
    return app


async def refreshing(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[FRAMES].keep_refreshing())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def refused(host: str, port: int, error: OSError) -> SpecError:
    """Why the page cannot be served, naming the option to change, as `coord worker
    --metrics-port` does for its endpoint: the port (taken, or privileged), else the host (a
    name that does not resolve, an address not of this machine)."""
    option = f"--port {port}" if error.errno in PORT_ERRORS else f"--host {host}"
    reason = error.strerror or str(error)
    return SpecError(f"{option}: cannot serve the dashboard at http://{host}:{port}/: {reason}")


async def serve(dashboard: Dashboard, *, host: str, port: int, interval: float) -> None:
    """Serve until cancelled (Ctrl-C, SIGTERM)."""
    frames = Frames(dashboard, interval)
    await frames.refresh()
    runner = web.AppRunner(application(frames), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as error:
            raise refused(host, port, error) from None
        log.info("dashboard served", url=f"http://{host}:{port}/")
        typer.echo(f"dashboard: http://{host}:{port}/")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
