"""Large results by reference (pass references, not large data).

A result whose data is larger than its request's `result_limit` is written to the payload store
and the activity returns only its `ResultReference`; a request whose `inputs` hold such a
reference gets the data back before its agent runs. So agents of every kind see data, while the
workflow's history and record hold a few dozen bytes per result."""

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from temporalio import activity
from temporalio.converter import JSONPlainPayloadConverter

from coord.infra.payload_store import PayloadUnavailable, StoredPayloads
from coord.models.mesh.agents import AgentResult, ResultReference
from coord.models.ops.retention import OwnerMark
from coord.models.wire.contract import FailureType, failure

JSON = JSONPlainPayloadConverter()


def owner() -> OwnerMark | None:
    """The workflow whose agent run stores the result: its record is what points to it."""
    if not activity.in_activity() or not activity.info().workflow_id:
        return None
    info = activity.info()
    return OwnerMark(workflow_id=info.workflow_id or "", namespace=info.namespace, kind="results")


class ResultStore:
    """The payload store, as agent runs use it: opened at first use, so a worker whose plans
    never pass a limit never touches it."""

    @cached_property
    def _payloads(self) -> StoredPayloads:
        return StoredPayloads()

    async def kept(self, result: AgentResult, limit: int | None) -> AgentResult:
        """`result`, with its data stored by reference when it is larger than `limit`."""
        if limit is None:
            return result
        payload = JSON.to_payload(result.data)
        assert payload is not None  # JSON takes any JSON object
        if len(payload.data) <= limit:
            return result
        reference = ResultReference(
            sha256=await self._payloads.put(payload, owner()), bytes=len(payload.data)
        )
        return result.model_copy(update={"data": {}, "reference": reference})

    async def resolved(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """`inputs`, each `{"result_ref": ...}` value replaced by the data it names."""
        return {key: await self._resolved(key, value) for key, value in inputs.items()}

    async def _resolved(self, key: str, value: Any) -> Any:
        reference = ResultReference.in_input(value)
        if reference is None:
            return value
        try:
            return JSON.from_payload(await self._payloads.get(reference.sha256))
        except PayloadUnavailable as missing:
            raise failure(
                FailureType.INVALID_PAYLOAD,
                f"inputs.{key}: result {reference.sha256} cannot be read from the payload "
                f"store ({missing.reason})",
                non_retryable=True,
            ) from None
