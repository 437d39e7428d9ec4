"""The payload store on an S3-compatible bucket: the SDK's S3 driver and its aioboto3 adapter.
Used when `COORD_PAYLOAD_STORE` names a bucket; aioboto3 comes with the `s3` extra and is
imported only then, so this module imports without it (and says which extra is missing)."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient

from coord.infra.extras import needs_extra


class SessionS3Client(S3StorageDriverClient):
    """Opens an aioboto3 client per operation, so a `Client.connect` needs no extra lifetime to
    manage; only payloads over the threshold come here, so the cost is rare."""

    def __init__(self) -> None:
        self._session = _session()

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        async with self._session.client("s3") as s3:
            await _adapter(s3).put_object(bucket=bucket, key=key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        async with self._session.client("s3") as s3:
            return await _adapter(s3).object_exists(bucket=bucket, key=key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        async with self._session.client("s3") as s3:
            return await _adapter(s3).get_object(bucket=bucket, key=key)

    def describe(self) -> Mapping[str, str]:
        region = self._session.region_name
        return {"client_region": region} if region else {}


def _adapter(s3: Any) -> S3StorageDriverClient:
    from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client

    return new_aioboto3_client(s3)


def s3_driver(bucket: str) -> S3StorageDriver:
    """Raises MissingExtra without the `s3` extra."""
    return S3StorageDriver(client=SessionS3Client(), bucket=bucket)


OWNERS_PREFIX = "coord/owners/"
"""Where the owners of objects whose key does not name them are marked: `<prefix><digest>/`."""


async def put_owner_mark(bucket: str, digest: str, name: str, text: str) -> None:
    """Marks (or marks again, refreshing its time) an owner of the object `digest`."""
    async with _session().client("s3") as s3:
        key = f"{OWNERS_PREFIX}{digest}/{name}"
        await s3.put_object(Bucket=bucket, Key=key, Body=text.encode())


def _session() -> Any:
    """An aioboto3 session; MissingExtra, naming the extra, when the `s3` extra is missing."""
    with needs_extra("s3", "the S3 payload store"):
        import aioboto3
    return aioboto3.Session()


class BucketListing:
    """What `coord gc` reads and removes in a bucket: keys page by page, an object's owner marks,
    and removal that keeps the object's content until the removal is decided for good."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._session = _session()

    async def keys(
        self, prefix: str, after: str | None, limit: int
    ) -> tuple[list[tuple[str, datetime]], bool]:
        """Up to `limit` keys under `prefix` after `after` (with their times), and whether more
        remain; the server's pages are 1,000 keys at most."""
        found: list[tuple[str, datetime]] = []
        start = after or ""
        async with self._session.client("s3") as s3:
            while len(found) < limit:
                page = await s3.list_objects_v2(
                    Bucket=self.bucket,
                    Prefix=prefix,
                    StartAfter=start,
                    MaxKeys=min(1000, limit - len(found)),
                )
                contents = page.get("Contents", [])
                found += [(item["Key"], item["LastModified"]) for item in contents]
                if not page.get("IsTruncated") or not contents:
                    return found, bool(page.get("IsTruncated"))
                start = contents[-1]["Key"]
        return found, True

    async def read(self, key: str) -> bytes:
        async with self._session.client("s3") as s3:
            response = await s3.get_object(Bucket=self.bucket, Key=key)
            body: bytes = await response["Body"].read()
            return body

    async def put(self, key: str, data: bytes) -> None:
        async with self._session.client("s3") as s3:
            await s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    async def delete(self, key: str) -> None:
        async with self._session.client("s3") as s3:
            await s3.delete_object(Bucket=self.bucket, Key=key)

    async def copy(self, source: str, target: str) -> None:
        async with self._session.client("s3") as s3:
            await s3.copy_object(
                Bucket=self.bucket, Key=target, CopySource={"Bucket": self.bucket, "Key": source}
            )
