"""What a correlation costs: the tokens its `llm` runs report are counted in the chain's, plan's
and saga's records, `coord events` prints them, and a token budget (a spec's or an agent
declaration's, the smaller winning) refuses the next `llm` run once nothing is left, before the
model is called: `budget_exceeded`, parked as such. The rules without a server; the rest on the
real dev server against a small local chat-completions server."""

import asyncio
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from coord.activities.mesh.run_agent import AgentActivities
from coord.models.chain.spec import ChainSpec
from coord.models.dlq.letter import DlqSelection
from coord.models.events.envelope import EventEnvelope
from coord.models.mesh.agents import AgentRegistry, AgentRequest, AgentResult
from coord.models.mesh.config import AgentsFile, WorkerSettings
from coord.models.mesh.usage import (
    MAX_MODEL_NAME,
    MAX_MODELS,
    OTHER_MODELS,
    UNNAMED_MODEL,
    TokenAllowance,
    TokenBudget,
    TokenUsage,
    refusal,
)
from coord.models.plan.report import final_report_markdown
from coord.models.plan.spec import PlanSpec, TaskState
from coord.models.saga.spec import SagaSpec, SagaStatus
from coord.models.wire.specs import SpecError, parse_model
from coord.starter import api
from coord.worker import build_worker
from tests.agents import registry
from tests.chat_server import chat_server, completion
from tests.helpers import event, eventually, parked
from tests.workers import COORD, run, server_env

KEY_ENV = "LLM_TEST_KEY"
ANSWER = '{"answer": "42"}'
USED = 17
"""What every answer of the test server reports using (12 in, 5 out)."""


def result(usage: Any = None, model: Any = "gpt-test", **metadata: Any) -> AgentResult:
    return AgentResult(agent="writer", metadata={"usage": usage, "model": model, **metadata})


def usage(prompt: int, completion: int, total: int | None = None) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion if total is None else total,
    }


# --- The rules ---------------------------------------------------------------------------------


def test_usage_counts_what_runs_report_in_all_and_by_model() -> None:
    record = TokenUsage()
    record.add(result(usage(12, 5)))
    record.add(result(usage(100, 20), model="other-model"))
    record.add(result(usage(1, 1)))
    assert (record.input, record.output, record.total, record.runs) == (113, 26, 139, 3)
    assert {name: count.total for name, count in record.by_model.items()} == {
        "gpt-test": 19,
        "other-model": 120,
    }
    assert record.describe() == (
        "139 tokens (113 in, 26 out) in 3 runs; gpt-test: 19, other-model: 120"
    )


@pytest.mark.parametrize(
    "reported",
    [None, "17", [12, 5], {"prompt_tokens": -1}, {"prompt_tokens": "12"}, {"total_tokens": True}],
    ids=["none", "text", "list", "negative", "string-count", "boolean"],
)
def test_usage_that_is_not_counts_adds_nothing(reported: Any) -> None:
    record = TokenUsage()
    record.add(result(reported))
    assert record == TokenUsage()


def test_a_total_not_reported_is_input_plus_output_and_a_nameless_model_is_unnamed() -> None:
    record = TokenUsage()
    record.add(result({"prompt_tokens": 7, "completion_tokens": 3}, model=None))
    assert (record.total, list(record.by_model)) == (10, [UNNAMED_MODEL])
    assert record.describe() == f"10 tokens (7 in, 3 out) in 1 run of {UNNAMED_MODEL}"


def test_model_names_are_bounded_in_length_and_in_number() -> None:
    record = TokenUsage()
    for n in range(MAX_MODELS * 2):
        record.add(result(usage(1, 0), model=f"model-{n}-" + "x" * 1000))
    assert len(record.by_model) == MAX_MODELS
    assert record.by_model[OTHER_MODELS].runs == MAX_MODELS + 1
    assert max(map(len, record.by_model)) == MAX_MODEL_NAME
    assert record.total == record.runs == MAX_MODELS * 2


def test_records_merge_into_a_correlations_total() -> None:
    chain, saga = TokenUsage(), TokenUsage()
    chain.add(result(usage(12, 5)))
    saga.add(result(usage(3, 2), model="small"))
    saga.add(result(usage(12, 5)))
    chain.merge(saga)
    assert (chain.total, chain.runs) == (39, 3)
    assert {name: count.runs for name, count in chain.by_model.items()} == {
        "gpt-test": 2,
        "small": 1,
    }


def test_a_run_is_sent_an_allowance_once_something_is_used_or_the_spec_sets_a_budget() -> None:
    record = TokenUsage()
    assert record.allowance(None) is None, "requests without language models stay as they were"
    assert record.allowance(TokenBudget(tokens=50)) == TokenAllowance(used=0, budget=50)
    record.add(result(usage(12, 5)))
    assert record.allowance(None) == TokenAllowance(used=17)


@pytest.mark.parametrize(
    ("used", "spec", "declared", "refused"),
    [
        (0, None, None, None),
        (10**9, None, None, None),
        (16, 17, None, None),
        (17, 17, None, "17 used of 17 (the spec's budget)"),
        (20, 17, None, "20 used of 17 (the spec's budget)"),
        (17, None, 17, "17 used of 17 (its declaration's budget)"),
        (10, 100, 10, "10 used of 10 (its declaration's budget)"),
        (10, 10, 100, "10 used of 10 (the spec's budget)"),
        (10, 10, 10, "10 used of 10 (the spec's budget)"),
        (50, 100, 60, None),
        (0, 0, None, "0 used of 0 (the spec's budget)"),
    ],
)
def test_the_smaller_budget_wins_and_refuses_once_nothing_is_left(
    used: int, spec: int | None, declared: int | None, refused: str | None
) -> None:
    allowance = TokenAllowance(used=used, budget=spec)
    declaration = None if declared is None else TokenBudget(tokens=declared)
    said = refusal(allowance, declaration)
    expected = None if refused is None else f"the correlation's token budget is spent: {refused}"
    assert said == expected


def test_a_declarations_budget_holds_from_nothing_used_when_the_run_is_sent_no_allowance() -> None:
    assert refusal(None, TokenBudget(tokens=0)) is not None
    assert refusal(None, TokenBudget(tokens=1)) is None


@pytest.mark.parametrize(
    ("name", "model"), [("chain", ChainSpec), ("plan", PlanSpec), ("saga", SagaSpec)]
)
def test_a_budget_in_a_spec_is_tokens_and_nothing_else(name: str, model: type[Any]) -> None:
    spec = {**SPECS[name], "budget": {"tokens": 1000}}
    assert parse_model(model, spec, name).budget == TokenBudget(tokens=1000)
    with pytest.raises(SpecError) as negative:
        parse_model(model, {**spec, "budget": {"tokens": -1}}, name)
    assert str(negative.value) == (
        f"{name}: budget.tokens: Input should be greater than or equal to 0"
    )
    with pytest.raises(SpecError) as other:
        parse_model(model, {**spec, "budget": {"dollars": 5}}, name)
    assert str(other.value) == (
        f"{name}: budget.tokens: Field required; budget.dollars: Extra inputs are not permitted"
    )


def test_an_llm_declaration_takes_a_budget() -> None:
    declared = AgentsFile.model_validate(
        {"worker": {"secrets": [KEY_ENV]}, "agents": {"writer": llm("http://x/v1", 40)}}
    )
    assert declared.agents["writer"].budget == TokenBudget(tokens=40)  # type: ignore[union-attr]


SPECS: dict[str, dict[str, Any]] = {
    "chain": {
        "name": "c",
        "triggers": ["Ask"],
        "subscriptions": [{"agent": "writer", "events": "Ask"}],
    },
    "plan": {"plan_id": "p", "tasks": [{"id": "a", "agent": "writer"}]},
    "saga": {"saga_id": "s", "steps": [{"name": "Write", "agent": "writer"}]},
}


def llm(base_url: str, budget: int | None = None, **fields: Any) -> dict[str, Any]:
    """An llm agent's declaration on the test server, with a token budget of its own if given."""
    return {
        "kind": "llm",
        "base_url": base_url,
        "model": "test-model",
        "api_key_env": KEY_ENV,
        "prompt": "Answer $question.",
        **({"budget": {"tokens": budget}} if budget is not None else {}),
        **fields,
    }


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-test-" + uuid.uuid4().hex
    monkeypatch.setenv(KEY_ENV, value)
    return value


def ask(tokens: TokenAllowance | None) -> AgentRequest:
    envelope = EventEnvelope.new("Ask", "/test", payload={"question": "the answer"})
    return AgentRequest(agent="writer", event=envelope, tokens=tokens)


@pytest.mark.parametrize(
    ("tokens", "declared", "whose"),
    [
        (TokenAllowance(used=USED, budget=USED), None, "the spec's"),
        (TokenAllowance(used=USED), USED, "its declaration's"),
        (None, 0, "its declaration's"),
    ],
    ids=["spec", "declaration", "declared-zero"],
)
async def test_the_llm_kind_refuses_a_run_over_budget_without_calling_the_model(
    key: str, tokens: TokenAllowance | None, declared: int | None, whose: str
) -> None:
    with chat_server(completion(ANSWER)) as chat:
        agents = registry({"secrets": [KEY_ENV]}, writer=llm(chat.url, declared))
        with pytest.raises(ApplicationError) as raised:
            await ActivityEnvironment().run(AgentActivities(agents).run_agent, ask(tokens))
    assert (raised.value.type, raised.value.non_retryable) == ("budget_exceeded", True)
    assert raised.value.message.startswith(
        "llm agent 'writer': the correlation's token budget is spent: "
    )
    assert raised.value.message.endswith(f"({whose} budget)")
    assert chat.received == [], "the model was not asked"


async def test_the_llm_kind_runs_while_something_is_left(key: str) -> None:
    with chat_server(completion(ANSWER)) as chat:
        agents = registry({"secrets": [KEY_ENV]}, writer=llm(chat.url, USED))
        tokens = TokenAllowance(used=USED - 1, budget=10**6)
        answered = await ActivityEnvironment().run(AgentActivities(agents).run_agent, ask(tokens))
    assert answered.data == {"answer": "42"}
    assert answered.metadata["usage"]["total_tokens"] == USED
    assert len(chat.received) == 1


# --- On the dev server -------------------------------------------------------------------------


def chain_spec(*, budget: int | None, hand_over: bool) -> ChainSpec:
    return ChainSpec.model_validate(
        {
            "name": "answers",
            "triggers": ["Ask"],
            "alerts": None,
            "subscriptions": [
                {
                    "agent": "writer",
                    "events": "Ask",
                    "hand_over": hand_over,
                    "retry": {"max_retries": 3, "initial_delay": "100ms"},
                    "publishes": {"on_success": "Answered", "on_failure": "NotAnswered"},
                }
            ],
            **({"budget": {"tokens": budget}} if budget is not None else {}),
        }
    )


@pytest.mark.parametrize(
    ("where", "hand_over"),
    [("spec", False), ("declaration", True)],
    ids=["spec-budget-run-in-the-chain", "declared-budget-run-in-a-chain-run"],
)
async def test_a_chain_counts_its_tokens_and_refuses_the_run_past_its_budget(
    dev_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    key: str,
    where: str,
    hand_over: bool,
) -> None:
    """The first answer uses the whole budget (17 tokens): the chain's record and `coord events`
    show it; the next `Ask` of the correlation is refused `budget_exceeded` without a request to
    the model, published as the failure event and parked as such."""
    correlation_id = f"cost-{uuid.uuid4().hex[:8]}"
    spec = chain_spec(budget=USED if where == "spec" else None, hand_over=hand_over)
    with chat_server(completion(ANSWER), completion(ANSWER)) as chat:
        writer = llm(chat.url, USED if where == "declaration" else None)
        agents = registry({"secrets": [KEY_ENV]}, writer=writer)
        async with build_worker(client, task_queue, agents):
            handle = await api.start_chain(client, spec, correlation_id, queue=task_queue)
            await api.publish(client, event(correlation_id, "Ask", question="first"))

            async def answered() -> bool:
                return (await api.chain_state(client, correlation_id)).tokens.runs == 1

            await eventually(answered)
            await api.publish(client, event(correlation_id, "Ask", question="second"))
            [entry] = await parked(
                client, task_queue, 1, DlqSelection(correlation_id=correlation_id)
            )

            async def announced() -> bool:  # the parking's notice reaches the chain
                return (await api.chain_state(client, correlation_id)).events_seen == 5

            await eventually(announced)
            await api.close_chain(client, correlation_id)
            state = await asyncio.wait_for(handle.result(), 30)
            code, table, err = await run(
                COORD, "events", correlation_id, env=server_env(dev_env, task_queue)
            )
    assert len(chat.received) == 1, "the refused run asked the model nothing"
    assert (state.tokens.input, state.tokens.output, state.tokens.total) == (12, 5, USED)
    assert list(state.tokens.by_model) == ["test-model"]
    assert (entry.failure_type, entry.action) == ("budget_exceeded", "Raise the budget or archive")
    assert entry.attempts == 1, "not retried"
    assert f"{USED} used of {USED}" in entry.message
    assert code == 0, err
    assert "Tokens: 17 tokens (12 in, 5 out) in 1 run of test-model" in table
    timeline = [row.split(" | ")[1].strip() for row in table.splitlines()[2:] if " | " in row]
    assert timeline == ["Ask", "Answered", "Ask", "NotAnswered", "EventDeadLettered"]


async def test_a_plan_counts_every_run_and_its_report_shows_them(
    client: Client, task_queue: str, key: str
) -> None:
    """`draft` uses 17 of 20 tokens; `announce` still has 3 left, so it runs (and goes past
    the budget); `publish` has none left and ends `budget_exceeded`. The final report says
    what the plan used, by model."""
    with chat_server(
        by_model={
            "writer-model": [completion(ANSWER, model="writer-model")] * 2,
            "announcer-model": [completion(ANSWER, model="announcer-model")] * 2,
        }
    ) as chat:
        spec = PlanSpec.model_validate(
            {
                "plan_id": f"cost-{uuid.uuid4().hex[:8]}",
                "budget": {"tokens": 20},
                "agents": {
                    "writer": llm(chat.url, model="writer-model"),
                    "announcer": llm(chat.url, model="announcer-model"),
                },
                "tasks": [
                    {"id": "draft", "agent": "writer", "input": {"question": "q"}},
                    {
                        "id": "announce",
                        "agent": "announcer",
                        "depends_on": ["draft"],
                        "input": {"question": "q"},
                    },
                    {
                        "id": "publish",
                        "agent": "writer",
                        "depends_on": ["announce"],
                        "input": {"question": "q"},
                    },
                ],
            }
        )
        allowing = AgentRegistry(WorkerSettings(inline_agents=["llm"], secrets=[KEY_ENV]))
        async with build_worker(client, task_queue, allowing):
            handle = await api.start_plan(client, spec, queue=task_queue)
            state = await asyncio.wait_for(api.plan_outcome(handle), 60)
    assert len(chat.received) == 2
    draft, announce, publish = state.tasks
    assert (draft.state, announce.state, publish.state) == (
        TaskState.SUCCEEDED,
        TaskState.SUCCEEDED,
        TaskState.ERROR,
    )
    assert publish.error is not None
    assert publish.error.type == "budget_exceeded"
    assert "34 used of 20 (the spec's budget)" in publish.error.message
    assert (state.tokens.total, state.tokens.runs) == (34, 2)
    assert (
        "- tokens: 34 tokens (24 in, 10 out) in 2 runs; writer-model: 17, announcer-model: 17"
        in (final_report_markdown(state))
    )


async def test_a_saga_counts_its_tokens_and_a_declared_budget_refuses_the_next_step(
    client: Client, task_queue: str, key: str
) -> None:
    with chat_server(completion(ANSWER), completion(ANSWER)) as chat:
        spec = SagaSpec.model_validate(
            {
                "saga_id": f"cost-{uuid.uuid4().hex[:8]}",
                "input": {"question": "q"},
                "agents": {"writer": llm(chat.url, USED)},
                "steps": [
                    {"name": "First", "agent": "writer"},
                    {"name": "Second", "agent": "writer"},
                ],
            }
        )
        allowing = AgentRegistry(WorkerSettings(inline_agents=["llm"], secrets=[KEY_ENV]))
        async with build_worker(client, task_queue, allowing):
            handle = await api.start_saga(client, spec, queue=task_queue)
            state = await asyncio.wait_for(api.saga_outcome(handle), 60)
    assert len(chat.received) == 1
    assert state.status == SagaStatus.COMPENSATED
    assert (state.tokens.total, state.tokens.runs) == (USED, 1)
    assert state.failure_reason is not None
    assert "token budget is spent: 17 used of 17 (its declaration's budget)" in (
        state.failure_reason
    )


def test_json_of_a_record_holds_its_tokens() -> None:
    """What `coord chain state --json` and the memo carry: the totals and the models."""
    record = TokenUsage()
    record.add(result(usage(12, 5)))
    assert json.loads(record.model_dump_json()) == {
        "input": 12,
        "output": 5,
        "total": 17,
        "runs": 1,
        "by_model": {"gpt-test": {"input": 12, "output": 5, "total": 17, "runs": 1}},
    }
