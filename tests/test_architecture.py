"""docs/architecture.md's "One event, end to end": the files a chain event crosses from
`coord publish` to its agent run. The list is checked against the tree and its stated count, so
it cannot go stale silently; the goal (under ten files) is held by a strict expected failure
that turns red the day the path is short enough, to be made a plain assertion then."""

import re

import pytest

from tests.conftest import ROOT

SECTION = "## One event, end to end"
GOAL = 10


def crossed() -> tuple[list[str], int]:
    """The section's numbered files, and the count it states."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    files = re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)
    stated = re.search(r"^Files crossed: (\d+)\.$", section, flags=re.MULTILINE)
    assert stated, f"{SECTION!r} states no 'Files crossed: N.'"
    return files, int(stated.group(1))


def test_the_listed_files_exist_each_once_and_are_counted() -> None:
    files, stated = crossed()
    assert files, f"{SECTION!r} lists no files"
    assert [path for path in files if not (ROOT / path).is_file()] == []
    assert len(set(files)) == len(files), "a file is listed twice: the path returns to it"
    assert stated == len(files)


@pytest.mark.xfail(strict=True, reason="the path crosses 12 files; the goal is under 10")
def test_one_event_crosses_fewer_than_ten_files() -> None:
    files, _ = crossed()
    assert len(files) < GOAL
