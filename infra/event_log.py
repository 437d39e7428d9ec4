"""Where correlations' logs live: segments (coord.models.events.log) in the payload store, under
names of their own, beside the objects stored by digest.

In the directory store: `<root>/logs/<correlation_id>/<first>-<last>.json`; in a bucket:
`coord/logs/<correlation_id>/<first>-<last>.json`. A segment is written whole (a rename in a
directory, one PUT in a bucket), so a reader never sees part of one, and writing it again (a
retried activity) replaces it with the same rows. Listing a correlation's segments is one
directory scan or one bucket listing, which gives the names, so a reader opens only the
segments after the sequence number it starts from."""

import asyncio
import contextlib
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from coord.infra.payload_store import PayloadStoreSettings, atomic_write
from coord.models.events.log import LogSegment, segment_span
from coord.models.wire.specs import IDENTIFIER

LOGS_DIRECTORY = "logs"
LOGS_PREFIX = "coord/logs/"
CORRELATION = re.compile(IDENTIFIER)


class SegmentStore(Protocol):
    async def write(self, segment: LogSegment) -> None:
        """Stored under its name; written again, the same object."""

    async def names(self, correlation_id: str) -> list[str]:
        """The names of the correlation's segments (any order)."""

    async def read(self, correlation_id: str, name: str) -> LogSegment: ...

    async def correlations(self, after: str | None, limit: int) -> list[str]:
        """Up to `limit` correlations with a log here, in the store's order, after `after`."""

    async def newest(self, correlation_id: str) -> datetime | None:
        """When the correlation's log was last written (None: it has none)."""

    async def remove(self, correlation_id: str) -> None:
        """The correlation's whole log."""


def checked(correlation_id: str) -> str:
    """A correlation id is a directory or key name here: only what ids may look like."""
    if not CORRELATION.fullmatch(correlation_id):
        raise ValueError(f"correlation_id: {correlation_id!r} is not an identifier")
    return correlation_id


class DirectorySegments:
    def __init__(self, root: Path) -> None:
        self.root = root / LOGS_DIRECTORY

    def _dir(self, correlation_id: str) -> Path:
        return self.root / checked(correlation_id)

    async def write(self, segment: LogSegment) -> None:
        path = self._dir(segment.correlation_id) / segment.name
        await asyncio.to_thread(atomic_write, path, segment.model_dump_json().encode())

    async def names(self, correlation_id: str) -> list[str]:
        directory = self._dir(correlation_id)
        try:
            entries = await asyncio.to_thread(lambda: [p.name for p in directory.iterdir()])
        except FileNotFoundError:
            return []
        return [name for name in entries if segment_span(name) is not None]

    async def read(self, correlation_id: str, name: str) -> LogSegment:
        text = await asyncio.to_thread((self._dir(correlation_id) / name).read_bytes)
        return LogSegment.model_validate_json(text)

    async def newest(self, correlation_id: str) -> datetime | None:
        directory = self._dir(correlation_id)

        def newest() -> datetime | None:
            times = [p.stat().st_mtime for p in directory.iterdir() if segment_span(p.name)]
            return datetime.fromtimestamp(max(times), UTC) if times else None

        try:
            return await asyncio.to_thread(newest)
        except FileNotFoundError:
            return None

    async def correlations(self, after: str | None, limit: int) -> list[str]:
        try:
            entries = await asyncio.to_thread(lambda: sorted(p.name for p in self.root.iterdir()))
        except FileNotFoundError:
            return []
        found = [name for name in entries if CORRELATION.fullmatch(name)]
        return [name for name in found if not after or name > after][:limit]

    async def remove(self, correlation_id: str) -> None:
        directory = self._dir(correlation_id)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(shutil.rmtree, directory)


class BucketSegments:
    def __init__(self, bucket: str) -> None:
        from coord.infra.s3_store import BucketListing

        self._bucket = BucketListing(bucket)

    @staticmethod
    def _prefix(correlation_id: str) -> str:
        return f"{LOGS_PREFIX}{checked(correlation_id)}/"

    async def write(self, segment: LogSegment) -> None:
        key = self._prefix(segment.correlation_id) + segment.name
        await self._bucket.put(key, segment.model_dump_json().encode())

    async def names(self, correlation_id: str) -> list[str]:
        prefix = self._prefix(correlation_id)
        keys = await self._all(prefix)
        return [name for key, _ in keys if segment_span(name := key.removeprefix(prefix))]

    async def read(self, correlation_id: str, name: str) -> LogSegment:
        data = await self._bucket.read(self._prefix(correlation_id) + name)
        return LogSegment.model_validate_json(data)

    async def newest(self, correlation_id: str) -> datetime | None:
        prefix = self._prefix(correlation_id)
        times = [
            time for key, time in await self._all(prefix) if segment_span(key.removeprefix(prefix))
        ]
        return max(times) if times else None

    async def correlations(self, after: str | None, limit: int) -> list[str]:
        """One key read per correlation: the next listing starts past all of its segments
        (`~` sorts after every segment name)."""
        found: list[str] = []
        start = f"{LOGS_PREFIX}{after}/~" if after else None
        while len(found) < limit:
            keys, _ = await self._bucket.keys(LOGS_PREFIX, start, 1)
            if not keys:
                break
            name = keys[0][0].removeprefix(LOGS_PREFIX).split("/", 1)[0]
            if CORRELATION.fullmatch(name):
                found.append(name)
            start = f"{LOGS_PREFIX}{name}/~"
        return found

    async def remove(self, correlation_id: str) -> None:
        for key, _ in await self._all(self._prefix(correlation_id)):
            await self._bucket.delete(key)

    async def _all(self, prefix: str) -> list[tuple[str, datetime]]:
        keys: list[tuple[str, datetime]] = []
        after: str | None = None
        while True:
            page, more = await self._bucket.keys(prefix, after, 1000)
            keys += page
            if not more or not page:
                return keys
            after = page[-1][0]


def segment_store(settings: PayloadStoreSettings | None = None) -> SegmentStore:
    """The payload store's segments: a bucket's or the directory's."""
    settings = settings or PayloadStoreSettings.load()
    if settings.location.startswith("s3://"):
        return BucketSegments(settings.location.removeprefix("s3://").strip("/"))
    return DirectorySegments(Path(settings.location).expanduser().resolve())
