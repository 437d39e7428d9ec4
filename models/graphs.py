"""Graph checks a spec runs before anything starts: what can ever happen (reachability) and what
would never settle (cycles). Pure and generic, so every pattern whose steps wait for things and
produce things (a chain's subscriptions, a coordinator's task graph) checks itself the same way."""

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
N = TypeVar("N", bound=Hashable)


@dataclass(frozen=True)
class Step:
    """Something that can happen once what it needs is present (`all` of it, or `any`), and
    then makes what it gives present."""

    needs: Sequence[str]
    gives: Sequence[str]
    needs_all: bool = False

    def ready(self, present: set[str]) -> bool:
        found = [need in present for need in self.needs]
        return all(found) if self.needs_all else any(found)


@dataclass(frozen=True)
class Reach(Generic[K]):
    present: set[str]
    """Everything that can ever be present: the start and what the steps that can happen give."""
    happened: set[K]
    """The steps that can ever happen."""


def reach(start: Iterable[str], steps: Mapping[K, Step]) -> Reach[K]:
    """Lets every step that can happen happen, until nothing new becomes present."""
    present, happened = set(start), set[K]()
    progress = True
    while progress:
        progress = False
        for key, step in steps.items():
            if key not in happened and step.ready(present):
                happened.add(key)
                present.update(step.gives)
                progress = True
    return Reach(present=present, happened=happened)


def find_cycle(
    edges: Mapping[N, Sequence[N]], counts: Callable[[list[N]], bool] = lambda cycle: True
) -> list[N] | None:
    """The first cycle that `counts` (all by default), as its nodes from where it starts back to
    that node again. Searched depth first from each node in order, following edges in order, so
    the cycle reported for a given graph is always the same one."""

    def visit(path: list[N]) -> list[N] | None:
        for nxt in edges[path[-1]]:
            if nxt in path:
                cycle = [*path[path.index(nxt) :], nxt]
                if counts(cycle):
                    return cycle
            elif found := visit([*path, nxt]):
                return found
        return None

    for start in edges:
        if found := visit([start]):
            return found
    return None
