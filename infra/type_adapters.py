"""The project's pydantic payload converter, its type adapters cached once for the process.

The SDK makes a new payload converter for every workflow run (and every serialization context),
and the pydantic converter caches the `TypeAdapter` of each type it decodes per instance: every
run built anew the adapters of its input and of each activity result type it met (building one
costs far more than using it: a saga with local agents spent about a tenth of its workflow code's
CPU there). One cache for the process keeps each adapter built once. Types defined inside a
sandboxed workflow module are new classes in every run, so the cache is bounded (least recently
used first out)."""

import functools

from pydantic import TypeAdapter
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter

MAX_ADAPTERS = 1024

_adapter = functools.lru_cache(maxsize=MAX_ADAPTERS)(TypeAdapter)


class SharedAdapterPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` (nullary, as the SDK makes it) with the process's adapters."""

    def __init__(self) -> None:
        super().__init__()
        for converter in self.converters.values():
            if isinstance(converter, PydanticJSONPlainPayloadConverter):
                converter._type_adapter = _adapter
