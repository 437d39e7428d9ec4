"""docs/architecture.md's "One event, end to end": the files a chain event crosses from
`coord publish` to its agent run. The list is checked against the tree and its stated count, so
it cannot go stale silently, and the path is held under ten files. And the sizes that keep each
workflow a thin shell over its model: a workflow class at most 200 lines, a model class 250."""

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

SECTION = "## One event, end to end"
GOAL = 10
WORKFLOW_CLASS_LINES = 200
MODEL_CLASS_LINES = 250


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


def test_one_event_crosses_fewer_than_ten_files() -> None:
    files, _ = crossed()
    assert len(files) < GOAL


def class_sizes(folder: str) -> dict[str, tuple[int, bool]]:
    """Each top-level class under `folder` (`path:Name`): its lines, from `class` to its last
    line, and whether it is a workflow (`@workflow.defn`)."""
    sizes = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                workflow = any("workflow.defn" in ast.unparse(d) for d in node.decorator_list)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                sizes[f"{Path(path).relative_to(ROOT)}:{node.name}"] = (lines, workflow)
    return sizes


def test_workflow_classes_are_thin_and_model_classes_small() -> None:
    workflows = {name: n for name, (n, defn) in class_sizes("workflows").items() if defn}
    models = {name: n for name, (n, _) in class_sizes("models").items()}
    assert workflows and models
    assert {n: s for n, s in workflows.items() if s > WORKFLOW_CLASS_LINES} == {}
    assert {n: s for n, s in models.items() if s > MODEL_CLASS_LINES} == {}
