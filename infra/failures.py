"""The product's typed failures carry no stack trace.

A failure whose type the product names (`FailureType`: a saga compensated, a spec refused
naming its field, an agent's `invalid_payload`) is an outcome, said by its type and message.
The SDK also writes the Python stack it was raised from, the worker's code path with its file
names, which `temporal workflow result`, `describe` and the UI print under the message: twenty
lines of noise to whoever reads why a run failed, and the worker's layout to whoever can read
the namespace. Any other exception (a bug, an agent's own) keeps its trace, which is how it is
found."""

from temporalio.api.failure.v1 import Failure
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.exceptions import ApplicationError

from coord.models.wire.contract import FailureType

PRODUCT_TYPES = frozenset(FailureType)


class TypedFailures(DefaultFailureConverter):
    """The SDK's failure converter, leaving out the stack trace of the product's typed
    failures (its causes are converted as they come)."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, ApplicationError) and exception.type in PRODUCT_TYPES:
            failure.stack_trace = ""
