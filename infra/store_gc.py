"""The payload store as `coord gc` sees it: its objects page by page with their owners, and their
removal, in a directory or a bucket alike.

Only what the store itself wrote is ever listed or removed: in a directory, regular files named
`<2 hex>/<sha256>` under the root (never a symbolic link, never anything the root does not
contain), and their owner marks; in a bucket, the SDK's keys under `v0/` and the marks under
`coord/owners/`. A removal keeps the content aside until it is decided for good: the object is
moved out of its name, its marks are read again, and if an owner marked it meanwhile (a writer
that found it still there and relied on it) it is put back."""

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from pydantic import ValidationError

from coord.infra.payload_store import OWNERS_SUFFIX, PayloadStoreSettings
from coord.models.ops.retention import OwnerMark, Stored
from coord.models.wire import contract

TRASH_PREFIX = ".gc-"
SHARD = re.compile(r"[0-9a-f]{2}")
MARK = re.compile(r"[0-9a-f]{32}\.json")

StillUnowned = Callable[[list[OwnerMark]], bool]
"""Given an object's marks read again just before it goes: True if it may still go."""


class StoreListing(Protocol):
    async def page(self, after: str | None, limit: int) -> tuple[list[Stored], str | None]:
        """Up to `limit` objects after `after`, and where the next page starts (None: done)."""

    async def remove(self, stored: Stored, still_unowned: StillUnowned) -> bool:
        """Removed (True), or kept because an owner marked it meanwhile (False)."""


def store_listing(settings: PayloadStoreSettings) -> StoreListing:
    if settings.location.startswith("s3://"):
        return BucketStore(settings.location.removeprefix("s3://").strip("/"))
    return DirectoryStore(Path(settings.location).expanduser().resolve())


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, UTC)


def _mark(text: str | bytes, marked_at: datetime) -> OwnerMark | None:
    try:
        return OwnerMark.model_validate_json(text).model_copy(update={"marked_at": marked_at})
    except ValidationError:
        return None


class DirectoryStore:
    """The directory store (`infra/payload_store.py`'s DirectoryDriver layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def page(self, after: str | None, limit: int) -> tuple[list[Stored], str | None]:
        return await asyncio.to_thread(self._page, after, limit)

    def _page(self, after: str | None, limit: int) -> tuple[list[Stored], str | None]:
        found: list[Stored] = []
        for name in self._names(after):
            if len(found) == limit:
                return found, found[-1].name
            stored = self._stored(name)
            if stored is not None:
                found.append(stored)
        return found, None

    def _names(self, after: str | None) -> Iterator[str]:
        """`<shard>/<digest>` of every object after `after`, in order; trash a stopped run left
        is put back first, so it is judged like any object."""
        for shard in self._sorted(self.root, SHARD):
            if after and shard < after[:2]:
                continue
            self._restore_trash(self.root / shard)
            for digest in self._sorted(self.root / shard, contract.STORED_OBJECT_NAME):
                name = f"{shard}/{digest}"
                if not after or name > after:
                    yield name

    @staticmethod
    def _sorted(directory: Path, pattern: re.Pattern[str]) -> list[str]:
        """Names matching `pattern` exactly, never a symbolic link."""
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            entry.name
            for entry in entries
            if pattern.fullmatch(entry.name) and not entry.is_symlink()
        )

    def _restore_trash(self, shard: Path) -> None:
        for entry in os.scandir(shard):
            if entry.name.startswith(TRASH_PREFIX) and entry.is_file(follow_symlinks=False):
                digest = entry.name.removeprefix(TRASH_PREFIX).split(".")[0]
                self._put_back(Path(entry.path), shard / digest)

    @staticmethod
    def _put_back(trash: Path, path: Path) -> None:
        """The object back under its name, unless a writer has written it again meanwhile."""
        if path.exists():
            trash.unlink(missing_ok=True)
        else:
            trash.replace(path)

    def _stored(self, name: str) -> Stored | None:
        path = self.root / name
        try:
            modified = _mtime(path)
        except FileNotFoundError:
            return None
        return Stored(name=name, modified=modified, owners=self._owners(name))

    def _owners(self, name: str) -> list[OwnerMark]:
        """Every owner mark; none at all if one does not read (an unknown owner keeps it)."""
        marks_dir = self.root / f"{name}{OWNERS_SUFFIX}"
        owners = []
        for mark_name in self._sorted(marks_dir, MARK):
            path = marks_dir / mark_name
            try:
                mark = _mark(path.read_bytes(), _mtime(path))
            except FileNotFoundError:
                continue
            if mark is None:
                return []
            owners.append(mark)
        return owners

    async def remove(self, stored: Stored, still_unowned: StillUnowned) -> bool:
        return await asyncio.to_thread(self._remove, stored, still_unowned)

    def _remove(self, stored: Stored, still_unowned: StillUnowned) -> bool:
        path = self.root / stored.name
        trash = path.with_name(f"{TRASH_PREFIX}{path.name}.{uuid.uuid4().hex}")
        try:
            path.rename(trash)
        except FileNotFoundError:
            return False
        if not still_unowned(self._owners(stored.name)):
            self._put_back(trash, path)
            return False
        trash.unlink()
        self._drop_marks(self.root / f"{stored.name}{OWNERS_SUFFIX}")
        return True

    def _drop_marks(self, marks_dir: Path) -> None:
        for mark_name in self._sorted(marks_dir, MARK):
            (marks_dir / mark_name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            marks_dir.rmdir()


SDK_KEY = re.compile(
    r"v0/ns/(?P<namespace>[^/]+)/wt/[^/]+/wi/(?P<workflow_id>[^/]+)/ri/[^/]+"
    r"/d/sha256/(?P<digest>[0-9a-f]{64})"
)
"""The SDK's key for an object stored for a workflow: its namespace and id name the owner."""
DIGEST_KEY = re.compile(r"v0/(?:ns/[^/]+/)?d/sha256/(?P<digest>[0-9a-f]{64})")
"""A key that names no workflow (a result stored by hand, a key too long for the ids): its
owners are the marks under `coord/owners/<digest>/`."""


class BucketStore:
    """An S3-compatible bucket (the SDK's S3 driver's keys)."""

    def __init__(self, bucket: str) -> None:
        from coord.infra.s3_store import OWNERS_PREFIX, BucketListing

        self._bucket = BucketListing(bucket)
        self._owners_prefix = OWNERS_PREFIX

    async def page(self, after: str | None, limit: int) -> tuple[list[Stored], str | None]:
        keys, more = await self._bucket.keys("v0/", after, limit)
        found = [await self._stored(key, modified) for key, modified in keys]
        stored = [item for item in found if item is not None]
        return stored, keys[-1][0] if more and keys else None

    async def _stored(self, key: str, modified: datetime) -> Stored | None:
        if match := SDK_KEY.fullmatch(key):
            owner = OwnerMark(
                workflow_id=unquote(match["workflow_id"]),
                namespace=unquote(match["namespace"]),
                marked_at=modified,
            )
            return Stored(name=key, modified=modified, owners=[owner])
        if match := DIGEST_KEY.fullmatch(key):
            return Stored(name=key, modified=modified, owners=await self._marks(match["digest"]))
        return None

    async def _marks(self, digest: str) -> list[OwnerMark]:
        keys, _ = await self._bucket.keys(f"{self._owners_prefix}{digest}/", None, 1000)
        owners = []
        for key, modified in keys:
            mark = _mark(await self._bucket.read(key), modified)
            if mark is None:
                return []
            owners.append(mark)
        return owners

    async def remove(self, stored: Stored, still_unowned: StillUnowned) -> bool:
        digest_key = DIGEST_KEY.fullmatch(stored.name)
        if digest_key is None:  # its owner is in its key: no one else marks it
            await self._bucket.delete(stored.name)
            return True
        trash = f"coord/trash/{uuid.uuid4().hex}"
        await self._bucket.copy(stored.name, trash)
        await self._bucket.delete(stored.name)
        marks_prefix = f"{self._owners_prefix}{digest_key['digest']}/"
        removed = still_unowned(await self._marks(digest_key["digest"]))
        if removed:
            for key, _ in (await self._bucket.keys(marks_prefix, None, 1000))[0]:
                await self._bucket.delete(key)
        else:
            await self._bucket.copy(trash, stored.name)
        await self._bucket.delete(trash)
        return removed
