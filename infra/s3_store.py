"""The payload store on an S3-compatible bucket: the SDK's S3 driver and its aioboto3 adapter.
Used when `COORD_PAYLOAD_STORE` names a bucket; aioboto3 comes with the `s3` extra and is
imported only then, so this module imports without it."""

from collections.abc import Mapping
from typing import Any

from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient


class SessionS3Client(S3StorageDriverClient):
    """Opens an aioboto3 client per operation, so a `Client.connect` needs no extra lifetime to
    manage; only payloads over the threshold come here, so the cost is rare."""

    def __init__(self) -> None:
        import aioboto3

        self._session = aioboto3.Session()

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
    """Raises ImportError without the `s3` extra."""
    return S3StorageDriver(client=SessionS3Client(), bucket=bucket)
