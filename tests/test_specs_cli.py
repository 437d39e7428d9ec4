"""`coord schema` and `coord validate` as a user runs them (no server): the schemas shipped in
schemas/ are what the models say, every example names its schema and validates against it, and
validation reports each problem of each file on a line of its own, without loading any agent."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from coord.models.chain.spec import ChainSpec
from coord.models.kinds import MODELS, SPEC_KINDS, kind_of, schema_of
from coord.models.saga.spec import SagaSpec
from coord.models.wire import specs
from coord.models.wire.specs import SpecError, read_document
from coord.starter.exits import ExitCode
from tests.conftest import ROOT
from tests.workers import COORD, run

SCHEMAS = ROOT / "schemas"
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
MODELINE = "# yaml-language-server: $schema="
NO_AGENTS = {"COORD_DEMO_AGENTS": "", "COORD_AGENTS": ""}
"""The session sets COORD_DEMO_AGENTS for its workers; a user's shell has neither."""


@pytest.mark.parametrize("kind", SPEC_KINDS)
async def test_the_committed_schema_is_what_coord_schema_prints(kind: str) -> None:
    code, out, err = await run(COORD, "schema", kind)
    assert code == 0, err
    committed = (SCHEMAS / f"{kind}.json").read_text()
    assert out == committed, f"schemas/{kind}.json is stale: run `make schemas`"
    schema = json.loads(out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def schema_named_by(example: Path) -> Path:
    first = example.read_text().splitlines()[0]
    assert first.startswith(MODELINE), f"{example}: the first line names no schema"
    return (example.parent / first.removeprefix(MODELINE)).resolve()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_example_names_its_kinds_schema_and_validates_against_it(example: Path) -> None:
    schema_file = schema_named_by(example)
    document = yaml.safe_load(example.read_text())
    assert schema_file == SCHEMAS / f"{kind_of(document)}.json"
    schema = json.loads(schema_file.read_text())
    errors = [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in jsonschema.Draft202012Validator(schema).iter_errors(document)
    ]
    assert errors == []


STARTED = [
    e for e in EXAMPLES if kind_of(yaml.safe_load(e.read_text())) in ("saga", "plan", "vote")
]
"""The examples a run starts from with the spec as its input (`start_run`)."""


@pytest.mark.parametrize("example", STARTED, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_run_decodes_the_spec_it_started_from_as_loaded(example: Path) -> None:
    """A start carries what the spec sets, not every default: the run decodes the same spec."""
    model = MODELS[kind_of(yaml.safe_load(example.read_text()))]
    spec = specs.load_spec(model, example)
    started = spec.model_dump(mode="json", exclude_unset=True)
    assert len(json.dumps(started)) < len(spec.model_dump_json())
    assert model.model_validate(started) == spec


def schema_errors(kind: str, document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema_of(kind))  # type: ignore[arg-type]
    return [error.message for error in validator.iter_errors(document)]


def test_the_schema_takes_every_form_the_models_take() -> None:
    """What the models accept beside their own types (a number of seconds for a duration, one
    event type for a list, a list for `publishes`), the schema accepts too, and it refuses what
    they refuse."""
    chain = {
        "name": "forms",
        "triggers": ["A"],
        "subscriptions": [
            {"agent": "x", "events": "A", "publishes": ["B"], "timeout": 30},
            {"agent": "y", "events": ["B"], "publishes": {"on_success": "C"}, "timeout": "1h30m"},
        ],
    }
    ChainSpec.model_validate(chain)
    assert schema_errors("chain", chain) == []
    wrong = {"saga_id": "s", "steps": [{"name": "a", "retries": 3}], "colour": "red"}
    with pytest.raises(ValueError):
        SagaSpec.model_validate(wrong)
    assert len(schema_errors("saga", wrong)) == 2, "an unknown field, at each level"


def test_the_schema_describes_fields_in_the_models_words() -> None:
    """Fields are documented by the docstring under them; the schema carries it to the editor."""
    subscription = schema_of("chain")["$defs"]["Subscription"]["properties"]
    assert subscription["hand_over"]["description"].startswith("`true`: every run goes to")
    assert schema_of("saga")["title"] == "Event Coordinator saga spec"


async def test_validate_passes_the_examples_with_the_agents_they_are_run_with() -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    code, out, err = await run(
        COORD,
        "validate",
        "--demo-agents",
        "--agents",
        str(ROOT / "examples" / "vote-agents.yaml"),
        "--correlation-id",
        "story-42",
        *map(str, examples),
        env=NO_AGENTS,
    )
    assert (code, out) == (0, ""), out + err
    assert err == f"{len(examples)} of {len(examples)} files valid\n"


async def test_validate_prints_each_problem_of_each_file_on_its_own_line(tmp_path: Path) -> None:
    saga = tmp_path / "saga.yaml"
    saga.write_text(
        "saga_id: deploy\n"
        "steps:\n"
        "  - {name: Build, timeout: soon}\n"
        "  - {name: Ship, agent: Shipper, colour: red}\n"
    )
    chain = tmp_path / "chain.json"
    chain.write_text(
        json.dumps(
            {
                "name": "c",
                "triggers": ["A"],
                "subscriptions": [{"agent": "nobody", "events": "A"}],
            }
        )
    )
    fine = tmp_path / "fine.yaml"
    fine.write_text("saga_id: ok\nsteps: [{name: DeployToStaging}]\n")
    code, out, err = await run(
        COORD, "validate", str(saga), str(chain), str(fine), "--demo-agents", env=NO_AGENTS
    )
    assert code == ExitCode.REFUSED
    lines = out.splitlines()
    assert lines[:2] == [
        f"{saga}: steps[0].timeout: 'soon' is not a duration; use 90s, 2h, 1d, 1h30m, 500ms, "
        "a number of seconds, or ISO 8601 such as PT1M30S",
        f"{saga}: steps[1].colour: Extra inputs are not permitted",
    ]
    assert lines[2].startswith(f"{chain}: subscriptions[0].agent: unknown agent 'nobody'; ")
    assert len(lines) == 3
    assert err == "1 of 3 files valid\n"


async def test_validate_tells_kinds_by_shape_and_asks_for_kind_when_it_cannot(
    tmp_path: Path,
) -> None:
    both = tmp_path / "both.yaml"
    both.write_text("saga_id: s\nplan_id: p\nsteps: []\ntasks: []\n")
    neither = tmp_path / "neither.yaml"
    neither.write_text("name: what\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    missing = tmp_path / "missing.yaml"
    broken = tmp_path / "broken.yaml"
    broken.write_text("steps: [\n")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"saga_id: \xff\xfe\n")
    files = (both, neither, listed, missing, broken, binary)
    code, out, _ = await run(COORD, "validate", *map(str, files), env=NO_AGENTS)
    assert code == ExitCode.REFUSED
    lines = out.splitlines()
    assert lines[0] == (
        f"{both}: cannot tell which kind of spec this is: it has saga_id (saga), plan_id (plan); "
        "give --kind"
    )
    assert lines[1] == (
        f"{neither}: cannot tell which kind of spec this is: it has none of saga_id, "
        "subscriptions, aggregator_id, plan_id, vote_id; give --kind"
    )
    assert lines[2] == f"{listed}: not a spec: a spec file holds a mapping of fields (YAML or JSON)"
    assert lines[3] == f"{missing}: cannot read: No such file or directory"
    assert lines[4].startswith(f"{broken}: not valid YAML/JSON: ")
    assert lines[5] == f"{binary}: not UTF-8 text (byte 9 is not)"
    assert len(lines) == 6 and "Traceback" not in out

    code, out, _ = await run(COORD, "validate", "--kind", "saga", str(both), env=NO_AGENTS)
    assert code == ExitCode.REFUSED
    assert out.splitlines() == [
        f"{both}: steps: List should have at least 1 item after validation, not 0",
        f"{both}: plan_id: Extra inputs are not permitted",
        f"{both}: tasks: Extra inputs are not permitted",
    ]


async def test_validate_never_imports_an_agents_code(tmp_path: Path) -> None:
    """A `python` agent's module is the user's code: checking a spec against its declaration must
    not run it (here it would leave a mark), on the CLI's machine or anywhere but a worker."""
    mark = tmp_path / "imported"
    (tmp_path / "loud.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n"
        "async def agent(event, context):\n    return {}\n"
    )
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  loud: {kind: python, callable: 'loud:agent'}\n")
    saga = tmp_path / "saga.yaml"
    saga.write_text("saga_id: s\nsteps: [{name: Go, agent: loud}]\n")
    env = {**NO_AGENTS, "PYTHONPATH": str(tmp_path)}
    code, out, err = await run(COORD, "validate", "--agents", str(agents), str(saga), env=env)
    assert (code, out, err) == (0, "", "1 of 1 files valid\n")
    assert not mark.exists()


async def test_a_bad_agents_file_given_to_validate_is_reported_as_a_files_problems(
    tmp_path: Path,
) -> None:
    """It used to stop validate with `error: ...` and no `N of M files valid` line."""
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  a: {url: 'http://x'}\n")
    saga = tmp_path / "saga.yaml"
    saga.write_text("saga_id: s\nsteps: [{name: Go, agent: a}]\n")
    code, out, err = await run(COORD, "validate", "--agents", str(agents), str(saga), env=NO_AGENTS)
    assert code == ExitCode.REFUSED
    assert out == f"{agents}: agents.a.kind: Field required; one of python, shell, http, llm\n"
    assert err == "0 of 1 files valid: none was checked, their agents file is not valid\n"


async def test_an_agents_problem_is_placed_where_it_was_written_not_under_its_kind(
    tmp_path: Path,
) -> None:
    """`agents: {a: {kind: http, url: ...}}` has its url at `agents.a.url`: pydantic placed the
    problem under the kind too (`agents.a.http.url`), a level the file does not have; so for
    a plan's inline agents."""
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  a: {kind: http, url: 'ftp://x'}\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "plan_id: p\nname: P\nagents:\n  b: {kind: shell, argv: 5}\ntasks: [{id: t, agent: b}]\n"
    )
    code, out, _ = await run(COORD, "validate", str(agents), str(plan), env=NO_AGENTS)
    assert code == ExitCode.REFUSED
    assert out.splitlines() == [
        f"{agents}: agents.a.url: String should match pattern '^https?://'",
        f"{plan}: agents.b.argv: Input should be a valid list",
    ]


async def test_an_agents_file_may_not_take_a_demo_agents_name(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  RunTests: {kind: shell, argv: ['true']}\n")
    code, out, _ = await run(COORD, "validate", "--demo-agents", str(agents), env=NO_AGENTS)
    assert code == ExitCode.REFUSED
    assert out.startswith(f"{agents}: agents.RunTests: the name is taken (by a demo agent")


def test_the_cli_loads_neither_the_worker_nor_the_activities() -> None:
    """Only `coord worker`, `dev` and `demo` host a worker, and load it when they run; every
    other command checks agents by their declarations (models/mesh/declared.py)."""
    probe = (
        "import sys, coord.starter.cli; "
        "print(sorted(m for m in sys.modules if m.startswith(('coord.worker', "
        "'coord.activities'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


def billion_laughs(levels: int) -> str:
    """A few hundred bytes of YAML naming 9**levels strings through its aliases."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_document_is_bounded_in_bytes_nesting_and_expanded_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the CLI reads (specs, payload files, agents files) is refused in one line naming the
    bound, before any of it is sent: a workflow would write out every alias and walk it."""
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(billion_laughs(8))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"blob": "x" * 40_000}))
    monkeypatch.setattr(specs, "MAX_DOCUMENT_BYTES", 30_000)
    refused = {}
    for path in (laughs, deep, big):
        with pytest.raises(SpecError) as error:
            read_document(path)
        refused[path.name] = str(error.value)
    assert refused == {
        "laughs.yaml": f"{laughs}: more than 1000000 values (YAML aliases count each time)",
        "deep.json": f"{deep}: nested deeper than 32 levels",
        "big.json": f"{big}: larger than 30000 bytes",
    }
    few = tmp_path / "few.yaml"
    few.write_text(billion_laughs(3))
    assert len(read_document(few)["a2"]) == 9, "aliases within the bound are read"
