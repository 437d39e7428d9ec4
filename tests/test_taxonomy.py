"""The event taxonomy holds together: every type the coordinator names has a row, the payload
models are named after their types (the models announce by the model's name), and the
lifecycle notices are system events apart from the subscribable announcements."""

from coord.models.events.envelope import LIFECYCLE_NOTICES
from coord.models.events.taxonomy import ANNOUNCEMENTS, BY_TYPE, TAXONOMY, Category


def test_each_type_is_its_payload_models_name_once() -> None:
    named = [kind for kind in TAXONOMY if not kind.named_by_spec]
    assert [kind.name for kind in named] == [kind.payload.__name__ for kind in named]
    assert len(BY_TYPE) == len(named)


def test_notices_are_system_events_and_announcements_are_the_plans_and_votes() -> None:
    assert {BY_TYPE[notice].category for notice in LIFECYCLE_NOTICES} == {Category.SYSTEM}
    assert not ANNOUNCEMENTS & LIFECYCLE_NOTICES
    assert {publisher for name in ANNOUNCEMENTS for publisher in BY_TYPE[name].publishers} == {
        "plan",
        "vote",
    }
    assert {"AgentHandoff", "DependencyResolved"} == {
        name for name in ANNOUNCEMENTS if BY_TYPE[name].category == Category.INTEGRATION
    }
