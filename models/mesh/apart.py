"""Large event payloads sent apart from the runs that carry them, so that a payload many runs share
is one object in the payload store, whatever the fan-out.

The payload store (infra/payload_store.py) keeps each argument of an activity at or above its
threshold as one object named by the SHA-256 of its content: equal arguments are one object, but
a run's `AgentRequest` differs from every other run's (its agent, its idempotency key). A vote
sends its proposal to each voter as its event's payload; a chain sends an event to each
subscription it matches, twice in each request (the event, and the join's `inputs`). Inside the
requests, a 1.5 MB proposal put to 50 voters was 50 objects (82 MB), and each time a run was sent
again (after a gate's refusal) one more. Sent apart, each distinct event payload of APART_BYTES
or more is an argument of its own after the request, and the store keeps it once however many
runs, and executions of each, send it:

    run_agent(request with those payloads emptied, places, payload, payload, ...)

`places` says where in the request each payload goes back; the worker puts them back (`joined`)
before the activity, or any interceptor of it, reads the request. A batch of local runs
(`run_agents`) sends its runs' payloads apart alike, and a chain the input of each run it hands
to a `ChainRun` (coord.models.chain.run), which that workflow joins back. A call carrying no
payload that large goes as one argument, as every call did before, so the workers serving agents
take both shapes."""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from coord.models.mesh.agents import AgentRequest
from coord.models.mesh.batches import LocalBatch

__all__ = ["APART_BYTES", "Place", "Places", "apart", "event_payloads", "joined", "sent_apart"]

M = TypeVar("M", bound=BaseModel)

APART_BYTES = 32 * 1024
"""An event payload of this many JSON bytes or more goes apart. Under the payload store's
default threshold (128 KiB), so a store set lower still finds it apart; a payload under it costs
the store at most this much again per run."""

Place = list[str | int]
"""Where a value sits in a JSON document: its keys and list indexes from the top."""


class Places(BaseModel):
    """The second argument of a call sent apart: for each argument after it, every place in the
    first argument where it goes (one payload, said once, may go to several: a chain run's
    event and the same event among its inputs)."""

    model_config = ConfigDict(extra="forbid")

    places: list[list[Place]] = Field(min_length=1)
    """As many as the distinct payloads sent apart: bounded by what the first argument holds
    (a join's slots, a batch's runs), never by a limit of its own, so no valid request fails
    to go apart."""


def event_payloads(request: AgentRequest, at: Place | None = None) -> list[tuple[Place, Any]]:
    """The event payloads a request carries, with their places (under `at`): its event's, and
    those of the events among its inputs (a join's, by slot). A list, not a generator: it is
    made for every run a workflow starts."""
    prefix = at or []
    found: list[tuple[Place, Any]] = [([*prefix, "event", "payload"], request.event.payload)]
    for key, value in request.inputs.items():
        payload = value.get("payload") if isinstance(value, dict) else None
        if isinstance(payload, dict):
            found.append(([*prefix, "inputs", key, "payload"], payload))
    return found


def _payloads_of(argument: AgentRequest | LocalBatch) -> list[tuple[Place, Any]]:
    if isinstance(argument, AgentRequest):
        return event_payloads(argument)
    runs = enumerate(argument.runs)
    return [each for i, run in runs for each in event_payloads(run.request, ["runs", i, "request"])]


def sent_apart(argument: object) -> list[Any]:
    """The arguments an activity is sent `argument` as: alone, or, an `AgentRequest` or a
    `LocalBatch` carrying event payloads of APART_BYTES or more, those payloads apart
    (`apart`)."""
    if not isinstance(argument, AgentRequest | LocalBatch):
        return [argument]
    return apart(argument, _payloads_of)


def apart(argument: M, payloads_of: Callable[[M], list[tuple[Place, Any]]]) -> list[Any]:
    """The arguments `argument` goes as: alone, or (when the payloads `payloads_of` finds in
    it include some of APART_BYTES or more) its JSON with those payloads emptied, their
    `Places`, then each distinct payload once, in the order first met. Most arguments carry
    nothing that large, which one measure of the whole tells (a payload inside is smaller
    than it): it is made for every run a workflow starts."""
    if len(pydantic_core.to_json(argument, fallback=str)) < APART_BYTES:
        return [argument]
    found: dict[bytes, int] = {}
    places: list[list[Place]] = []
    payloads: list[Any] = []
    for place, payload in payloads_of(argument):
        text = pydantic_core.to_json(payload, fallback=str)  # as `json_size` measures
        if len(text) < APART_BYTES:
            continue
        index = found.setdefault(text, len(payloads))
        if index == len(payloads):
            payloads.append(payload)
            places.append([])
        places[index].append(place)
    if not payloads:
        return [argument]
    document = argument.model_dump(mode="json")
    for place in (place for each in places for place in each):
        _put(document, place, {})
    return [document, Places(places=places), *payloads]


def joined(arguments: Sequence[Any]) -> Any:
    """The first of the arguments `sent_apart` made (decoded as plain JSON), with each payload
    after the `Places` put back where they say: the document as it was. Raises ValueError
    saying what does not fit."""
    document, sent_places, *payloads = arguments
    places = Places.model_validate(sent_places).places
    if len(places) != len(payloads):
        raise ValueError(f"{len(payloads)} payloads sent apart for {len(places)} places")
    for each, payload in zip(places, payloads, strict=True):
        for place in each:
            _put(document, place, payload)
    return document


def _put(document: Any, place: Place, value: Any) -> None:
    """`value` at `place`, which must hold an object already (the emptied payload)."""
    try:
        *path, last = place
        parent = document
        for key in path:
            parent = parent[key]
        if not isinstance(parent[last], dict):
            raise TypeError("not an object")
        parent[last] = value
    except (LookupError, TypeError, ValueError) as error:
        raise ValueError(f"no payload at {place}: {error}") from None
