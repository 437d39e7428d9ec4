"""The project's pydantic payload converter: one for the process, on one JSON converter (and the
type adapters it caches).

The SDK makes a new payload converter for every data converter it derives: every workflow
run, every payload of each workflow task's activation and commands (a data converter for each
serialization context, and for each payload checked for the payload store), every activity.
The pydantic converter builds a JSON serializer and caches the `TypeAdapter` of each type it
decodes per instance, so every run built anew the adapters of its input and of each activity
result type it met (building one costs far more than using it). One JSON converter for the
process keeps each adapter built once; and since neither it nor the SDK's other encodings hold
any state of their own, nor take a serialization context, the converter built on them is one
instance as well: the SDK's call for "a new one" (about forty a saga) returns it, instead of
building the composite of encodings again each time. Types defined inside a sandboxed workflow
module are new classes in every run, so the adapters' cache is bounded (least recently used
first out)."""

from typing import ClassVar, Self

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
    converter: the same instance whoever asks for one."""

    _shared: ClassVar["SharedAdapterPayloadConverter | None"] = None

    def __new__(cls) -> Self:
        shared = cls.__dict__.get("_shared")
        if shared is None:
            shared = super().__new__(cls)
            converters = DefaultPayloadConverter.default_encoding_payload_converters
            CompositePayloadConverter.__init__(
                shared,
                *(_JSON if isinstance(c, JSONPlainPayloadConverter) else c for c in converters),
            )
            cls._shared = shared
        return shared

    def __init__(self) -> None:
        """Built once, by `__new__`: nothing to do for the SDK's later calls."""
