"""Large payloads by reference (a claim check), so no event the server accepts can wedge a workflow.

Temporal refuses any payload over 2 MB and any workflow task whose commands add up to more than
4 MB; a chain that forwards five 1 MB events, parks ten, or carries a large timeline across
continue-as-new would fail its task over and over. Every payload at or above a threshold (128 KiB
by default) is therefore written to a payload store, and the history holds a small reference to
it. This is the SDK's own external storage (`temporalio.converter.ExternalStorage`) on the data
converter of every client and worker of the project, so it is transparent: workflow code,
queries, the `coord` CLI and agents see the values, never the references. It applies to what the
worker sends too, so a 1.9 MB signal sent without it (by the Temporal CLI, say) is stored by
reference as soon as the workflow passes it on (an activity input, a forwarded signal, a
continue-as-new input, a query result).

The store is a directory by default (`payloads` in the per-user state directory,
infra/state_dir.py, whatever the working directory, so the clients and workers of one machine
share it), or an S3-compatible bucket: `COORD_PAYLOAD_STORE=s3://BUCKET` with the `s3` extra
installed (`pip install 'event-coordinator[s3]'`; endpoint and credentials from the usual
`AWS_*` variables). `COORD_PAYLOAD_THRESHOLD` sets the threshold in bytes. Objects are named by
the SHA-256 of their content, so a retried write is harmless and equal payloads share one object.

Each write also records its owner, the workflow it was stored for (the SDK names it: the workflow
started, signalled or running), as a small mark beside the object (`<digest>.owners/` in the
directory, `coord/owners/<digest>/` in a bucket for objects whose key does not name it already),
so `coord gc` can tell which objects nothing refers to any more (infra/store_gc.py). The mark is
written before the object is looked for, which is what lets a collection run that removes an
object notice a writer that came meanwhile and put it back.
"""

import asyncio
import dataclasses
import hashlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    JSONPlainPayloadConverter,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from coord.infra.extras import MissingExtra
from coord.infra.failures import TypedFailures
from coord.infra.logs import get_logger
from coord.infra.s3_store import put_owner_mark, s3_driver
from coord.infra.state_dir import payloads_dir
from coord.infra.type_adapters import SharedAdapterPayloadConverter
from coord.models.ops.retention import OwnerMark
from coord.models.wire import contract
from coord.models.wire.errors import CoordError

STORE_ENV = "COORD_PAYLOAD_STORE"
THRESHOLD_ENV = "COORD_PAYLOAD_THRESHOLD"
DEFAULT_THRESHOLD = 128 * 1024
"""Well under the server's 2 MB per payload, so a task that carries several stays under 4 MB."""

OWNERS_SUFFIX = ".owners"
log = get_logger("coord.payloads")


class PayloadStoreError(CoordError, ValueError):
    """The payload store settings are wrong; the message names the variable."""


class PayloadUnavailable(CoordError, LookupError):
    """A stored object that cannot be read back (a wiped or expired store, a forged name)."""

    def __init__(self, digest: str, reason: str) -> None:
        super().__init__(f"stored payload {digest}: {reason}")
        self.digest = digest
        self.reason = reason


def unavailable(digest: str, reason: str) -> Payload:
    """What a reference resolves to when its object is gone (a wiped or expired store): a plain
    JSON value naming it, so a workflow records and parks the event like any invalid one rather
    than failing its task over and over."""
    log.error("stored payload unavailable", sha256=digest, reason=reason)
    value = {contract.PAYLOAD_UNAVAILABLE: {"sha256": digest, "reason": reason}}
    payload = JSONPlainPayloadConverter().to_payload(value)
    assert payload is not None
    return payload


def owner_of(context: StorageDriverStoreContext) -> OwnerMark | None:
    """The workflow a payload is stored for, when the SDK names one."""
    target = context.target
    if isinstance(target, StorageDriverWorkflowInfo) and target.id:
        return OwnerMark(workflow_id=target.id, namespace=target.namespace)
    return None


def mark_name(owner: OwnerMark) -> str:
    """A mark's file or key name: fixed length whatever the workflow id (which the mark holds)."""
    identity = f"{owner.namespace}\0{owner.workflow_id}\0{owner.kind}".encode()
    return hashlib.sha256(identity).hexdigest()[:32] + ".json"


def mark_text(owner: OwnerMark) -> str:
    return owner.model_dump_json(exclude={"marked_at"})


def atomic_write(path: Path, data: bytes) -> None:
    """Written beside, then renamed over: concurrent writers never expose a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    partial.write_bytes(data)
    partial.replace(path)


class DirectoryDriver(StorageDriver):
    """Payloads as files named by their SHA-256, written atomically (a rename), so concurrent
    writers of the same payload never expose a partial file; each owner's mark beside them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def name(self) -> str:
        return "coord-directory"

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def owners_dir(self, digest: str) -> Path:
        return self.root / digest[:2] / f"{digest}{OWNERS_SUFFIX}"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        owner = owner_of(context)
        return [await asyncio.to_thread(self.write, payload, owner) for payload in payloads]

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [await asyncio.to_thread(self._read, claim) for claim in claims]

    def write(self, payload: Payload, owner: OwnerMark | None) -> StorageDriverClaim:
        """The owner's mark first (refreshing its time), then the object if it is not there."""
        data = payload.SerializeToString(deterministic=True)
        digest = hashlib.sha256(data).hexdigest()
        if owner is not None:
            marks = self.owners_dir(digest)
            atomic_write(marks / mark_name(owner), mark_text(owner).encode())
        path = self._path(digest)
        if not path.exists():
            atomic_write(path, data)
        return StorageDriverClaim(claim_data={"sha256": digest})

    def _read(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data.get("sha256", "")
        try:
            return self.read(digest)
        except PayloadUnavailable as missing:
            return unavailable(digest, missing.reason)

    def read(self, digest: str) -> Payload:
        """The payload stored as `digest`; PayloadUnavailable says why it cannot be read."""
        if not contract.STORED_OBJECT_NAME.fullmatch(digest):
            raise PayloadUnavailable(digest, "not a SHA-256 reference")
        try:
            data = self._path(digest).read_bytes()
        except FileNotFoundError:
            raise PayloadUnavailable(digest, f"not in the payload store {self.root}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise PayloadUnavailable(digest, "the stored content does not match its digest")
        return Payload.FromString(data)


@dataclass(frozen=True)
class PayloadStoreSettings:
    location: str
    threshold: int

    @classmethod
    def load(cls) -> "PayloadStoreSettings":
        location = os.environ.get(STORE_ENV) or str(payloads_dir())
        raw_threshold = os.environ.get(THRESHOLD_ENV, str(DEFAULT_THRESHOLD))
        try:
            threshold = int(raw_threshold)
        except ValueError:
            threshold = -1
        if threshold < 0:
            raise PayloadStoreError(
                f"{THRESHOLD_ENV}: {raw_threshold!r} is not a size in bytes (e.g. 131072)"
            )
        return cls(location, threshold)

    def driver(self) -> StorageDriver:
        if self.location.startswith("s3://"):
            return _s3_driver(self.location)
        return DirectoryDriver(Path(self.location).expanduser().resolve())

    def describe(self) -> str:
        return f"payloads of {self.threshold:,} bytes or more stored in {self.location}"


class StoredPayloads:
    """Payloads put in the payload store by hand and found again by their SHA-256 alone: what a
    result too large for history becomes (the workflow keeps only the digest). The converter's
    own driver and settings, storing with no target so the digest is the whole address."""

    def __init__(self, settings: PayloadStoreSettings | None = None) -> None:
        self._settings = settings or PayloadStoreSettings.load()
        self._driver = self._settings.driver()

    async def put(self, payload: Payload, owner: OwnerMark | None = None) -> str:
        """Stored with `owner` marked as holding it (the workflow whose record will point to it)."""
        if isinstance(self._driver, DirectoryDriver):
            claim = await asyncio.to_thread(self._driver.write, payload, owner)
            return claim.claim_data["sha256"]
        if owner is not None:
            digest = hashlib.sha256(payload.SerializeToString()).hexdigest()
            await put_owner_mark(self._bucket, digest, mark_name(owner), mark_text(owner))
        [claim] = await self._driver.store(StorageDriverStoreContext(), [payload])
        return claim.claim_data["hash_value"]

    @property
    def location(self) -> str:
        """Where the objects are: the directory (resolved), or `s3://BUCKET`."""
        if isinstance(self._driver, DirectoryDriver):
            return str(self._driver.root)
        return self._settings.location

    @property
    def _bucket(self) -> str:
        return self._settings.location.removeprefix("s3://").strip("/")

    async def get(self, digest: str) -> Payload:
        """Raises PayloadUnavailable when the store does not hold it (any more)."""
        if isinstance(self._driver, DirectoryDriver):
            return await asyncio.to_thread(self._driver.read, digest)
        if not contract.STORED_OBJECT_NAME.fullmatch(digest):
            raise PayloadUnavailable(digest, "not a SHA-256 reference")
        claim = StorageDriverClaim(
            claim_data={
                "bucket": self._bucket,
                "key": f"v0/d/sha256/{digest}",  # the SDK's S3 key for a store with no target
                "hash_algorithm": "sha256",
                "hash_value": digest,
            }
        )
        try:
            [payload] = await self._driver.retrieve(StorageDriverRetrieveContext(), [claim])
        except (RuntimeError, ValueError) as error:
            raise PayloadUnavailable(digest, str(error)) from None
        return payload


def data_converter(settings: PayloadStoreSettings | None = None) -> DataConverter:
    """The project's converter: pydantic values, large ones by reference to the payload store;
    its typed failures without a stack trace (`TypedFailures`)."""
    settings = settings or PayloadStoreSettings.load()
    storage = ExternalStorage(
        drivers=[settings.driver()], payload_size_threshold=settings.threshold
    )
    return dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=SharedAdapterPayloadConverter,
        failure_converter_class=TypedFailures,
        external_storage=storage,
    )


def _s3_driver(location: str) -> StorageDriver:
    """The SDK's S3 driver on aioboto3 (the `s3` extra); any S3-compatible server works through
    `AWS_ENDPOINT_URL`."""
    bucket = location.removeprefix("s3://").strip("/")
    if not bucket or "/" in bucket:
        raise PayloadStoreError(f"{STORE_ENV}: {location!r} should be s3://BUCKET")
    try:
        return s3_driver(bucket)
    except MissingExtra as missing:
        raise PayloadStoreError(f"{STORE_ENV}: {location!r}: {missing}") from None
