"""The worker's side of payloads sent apart (coord.models.mesh.apart): a `run_agent` or
`run_agents` that arrives as several arguments is joined back into its one request or batch
before anything else of the worker reads it, so the activity, its interceptors and the agent see
the whole request, wherever its payloads travelled.

The SDK decodes an activity's arguments by its parameters' types only when their count matches
(one here): arguments sent apart arrive as plain JSON, which is validated here, once joined, as
the one argument would have been. Ones that do not fit together fail the run for good
(`invalid_input`): sending them again would not change them."""

from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from coord.models import calls as refs
from coord.models.mesh.apart import joined
from coord.models.wire.contract import FailureType, failure

SENT_APART: dict[str, Any] = {
    refs.RUN_AGENT.name: refs.RUN_AGENT.argument,
    refs.RUN_AGENTS.name: refs.RUN_AGENTS.argument,
}
"""The activities whose argument may arrive apart, with its model."""


class PayloadsJoined(Interceptor):
    """Joins an activity's arguments sent apart into its one argument (first among the
    interceptors that read the argument)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _JoiningInbound(next)


class _JoiningInbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        kind = activity.info().activity_type
        model = SENT_APART.get(kind)
        if model is not None and len(input.args) > 1:
            try:
                input.args = [model.model_validate(joined(input.args))]
            except ValueError as error:  # pydantic's ValidationError is one
                raise failure(
                    FailureType.INVALID_INPUT,
                    f"{kind}: the payloads sent apart do not join: {error}",
                    non_retryable=True,
                ) from None
        return await super().execute_activity(input)
