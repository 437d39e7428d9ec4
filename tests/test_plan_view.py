"""What a running plan shows and sends, without a server: its task records (`TaskBook`: counts
and the tasks the views list), its readers' views (`PlanView`: the `progress` query and the UI's
current details) and its agents' requests (`TaskRequests`)."""

from datetime import timedelta

from coord.models.mesh.agents import AgentResult
from coord.models.mesh.assignment import Assignment
from coord.models.mesh.results import ResultReference
from coord.models.plan.spec import TaskState
from coord.models.plan.view import DETAILS_RUNNING
from tests.test_plan_model import T0, T1, model, started, succeed


def test_the_book_counts_tasks_by_state_and_lists_the_watched_in_declaration_order() -> None:
    plan = model({"id": "a"}, {"id": "b"}, {"id": "c", "approval": {}})
    started(plan)
    plan.graph.task_awaiting_approval("c", T0)
    plan.graph.task_ready("b", T0)
    plan.runs.run_started("b", T0)
    plan.graph.task_ready("a", T0)
    plan.runs.run_started("a", T0)
    book = plan.book
    assert [record.id for record in book.watched()] == ["a", "b", "c"]
    assert [record.id for record in book.active()] == ["a", "b"]
    assert book.counts() == {TaskState.AWAITING_APPROVAL: 1, TaskState.RUNNING: 2}
    assert book.busy() and not book.finished()
    plan.graph.task_succeeded("a", T1)
    plan.graph.task_cancelled("b", T1, "x")
    plan.graph.task_cancelled("c", T1, "x")
    assert not book.busy() and book.finished() and book.watched() == []


def test_progress_names_running_tasks_and_what_the_plan_waits_for() -> None:
    plan = model({"id": "a", "approval": {"timeout": "1h"}}, {"id": "b"}, max_workers=1)
    started(plan)
    plan.graph.task_awaiting_approval("a", T0)
    plan.graph.task_ready("b", T0)
    plan.runs.run_started("b", T0)
    view = plan.view.progress(T1)
    assert [(r.task, r.state, r.elapsed_s) for r in view.running] == [
        ("b", TaskState.RUNNING, 30.0)
    ]
    deadline = T0 + timedelta(hours=1)
    assert view.waiting_for == [
        f"approval of a (rejected at {deadline:%Y-%m-%d %H:%M:%S} UTC if none comes)"
    ]


def test_the_details_list_the_first_running_tasks_and_the_agents_picked() -> None:
    tasks = [{"id": f"t{i}"} for i in range(DETAILS_RUNNING + 2)]
    plan = model(*tasks, max_workers=50)
    started(plan)
    for task in tasks:
        plan.graph.task_ready(task["id"], T0)
        plan.runs.run_started(task["id"], T0)
    plan.runs.task_assigned(
        "t0", Assignment(capabilities=["sql"], strategy="least_loaded", agent="db", bids=[])
    )
    details = plan.view.details().split("\n\n")
    assert details[0] == f"**Status:** running ({DETAILS_RUNNING + 2} running)"
    assert details[1] == f"- **t0** running since {T0:%Y-%m-%d %H:%M:%S} UTC"
    assert details[DETAILS_RUNNING + 1] == "- and 2 more"
    assert details[DETAILS_RUNNING + 2].startswith("**Picked by capability:** t0: db")
    assert plan.record("t0").agent == "db"


def test_a_run_gets_its_dependencies_results_and_a_reviewer_the_task_s_input() -> None:
    plan = model({"id": "a"}, {"id": "b"}, {"id": "c", "depends_on": ["a", "b"], "input": {"x": 1}})
    started(plan)
    succeed(plan, "a", n=1)
    reference = ResultReference(sha256="cd" * 32, bytes=9_000)
    plan.graph.task_ready("b", T0)
    plan.runs.run_started("b", T0)
    plan.runs.run_succeeded("b", T0, AgentResult(agent="work", reference=reference))
    plan.graph.task_succeeded("b", T0)
    task = plan.task("c")
    request = plan.requests.agent_request(task, 2, "plan-p", {"review_notes": []})
    assert request.inputs == {"a": {"n": 1}, "b": reference.as_input(), "review_notes": []}
    assert (request.idempotency_key, request.event.event.type) == ("plan-p/c/2", "cRequested")
    assert request.event.payload == {"x": 1}
    review = plan.requests.reviewer_request(task, "rev", "c/review/x/1", "plan-p", {"r": 1})
    assert (review.agent, review.idempotency_key) == ("rev", "plan-p/c/review/x/1")
    assert (review.event.event.type, review.inputs) == ("cReviewRequested", {"r": 1})
