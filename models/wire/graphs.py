"""Graph checks a spec runs before anything starts: what can ever happen (reachability) and what
would never settle (cycles). Pure and generic, so every pattern whose steps wait for things and
produce things (a chain's subscriptions, a coordinator's task graph) checks itself the same way."""

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
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


def find_cycle(edges: Mapping[N, Sequence[N]]) -> list[N] | None:
    """The first cycle met, as its nodes from where it starts back to that node again, or None.

    One depth-first pass (linear in nodes and edges, iterative, so a plan of a thousand tasks in
    a line neither takes exponential time nor exhausts the stack), starting from each node in
    order and following edges in order, so a given graph always reports the same cycle. Edges to
    nodes that are not keys are ignored: callers check unknown names first."""
    done: set[N] = set()
    for root in edges:
        if root in done:
            continue
        path, on_path = [root], {root}
        pending: list[Iterator[N]] = [iter(edges[root])]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                pending.pop()
                done.add(node := path.pop())
                on_path.discard(node)
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done and nxt in edges:
                path.append(nxt)
                on_path.add(nxt)
                pending.append(iter(edges[nxt]))
    return None
