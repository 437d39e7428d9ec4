"""The project's pydantic payload converter, its JSON converter (and the type adapters it
caches) made once for the process.

The SDK makes a new payload converter for every workflow run, and more for the payloads of each
workflow task's commands (for each serialization context, and whenever payloads are checked
for the payload store); the pydantic converter builds a JSON serializer and caches the
`TypeAdapter` of each type it decodes per instance. So every run built anew the adapters of its
input and of each activity result type it met (building one costs far more than using it), and
every command's payloads a serializer. One JSON converter for the process keeps each adapter
built once and makes a payload converter cheap. Types defined inside a sandboxed workflow module
are new classes in every run, so the cache is bounded (least recently used first out)."""

from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

MAX_ADAPTERS = 1024

_JSON = PydanticJSONPlainPayloadConverter(max_cached_type_adapters=MAX_ADAPTERS)
"""Stateless but for its cache of adapters, which is safe to share between threads."""


class SharedAdapterPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` (nullary, as the SDK makes it) on the process's JSON
    converter."""

    def __init__(self) -> None:
        converters = DefaultPayloadConverter.default_encoding_payload_converters
        CompositePayloadConverter.__init__(
            self, *(_JSON if isinstance(c, JSONPlainPayloadConverter) else c for c in converters)
        )
