"""qa_min: a zero-dependency client for the question-answering service.

    import qa_min as qa

    class Review(qa.Questions):
        toxic = qa.YesNo("The text insults someone", "The text insults no one")

    with qa.Client(base_url="http://127.0.0.1:8080") as client:
        print(client.ask("Some text", Review).answers.toxic)

Only the question, error and client classes load with ``import qa_min``; the transport loads
with the first ``Client``, and ``RetryPolicy`` and ``Call`` on first use, so that importing the
package stays cheap. ``qa_min.testing`` holds a fake service to test against.
"""

from __future__ import annotations

from ._client import CancelToken, Client, RetryBudget
from ._errors import (
    APIStatusError,
    BadRequest,
    Canceled,
    ClientClosed,
    ConfigurationError,
    ConnectionFailed,
    Diagnostics,
    DuplicateQuestionName,
    InvalidBaseUrl,
    InvalidModel,
    InvalidName,
    InvalidOption,
    InvalidQuestion,
    InvalidResponse,
    InvalidState,
    MissingApiKey,
    NoQuestions,
    NotFound,
    Overloaded,
    PermissionDenied,
    QAError,
    RateLimited,
    RequestTimeout,
    ServerError,
    ServiceBusy,
    Unauthorized,
    UnexpectedStatus,
    UnprocessableEntity,
    ValidationError,
)
from ._questions import (
    AskResponse,
    Choice,
    CoreResponse,
    Model,
    ModelList,
    NamedQuestion,
    Questions,
    Request,
    Score,
    YesNo,
)
from ._ratelimit import RateLimit

__version__ = "0.1.0"

PUBLIC_BASE_URL = "https://api.qa-service.com"
"""The address of the public service; an API key is required there."""

DEFAULT_MODEL = "judge-latest"
"""The latest alias of the primary model family, used when no model is configured."""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._futures import Call as Call
    from ._retry import RetryPolicy as RetryPolicy

__all__ = [
    "DEFAULT_MODEL",
    "PUBLIC_BASE_URL",
    "APIStatusError",
    "AskResponse",
    "BadRequest",
    "Call",
    "CancelToken",
    "Canceled",
    "Choice",
    "Client",
    "ClientClosed",
    "ConfigurationError",
    "ConnectionFailed",
    "CoreResponse",
    "Diagnostics",
    "DuplicateQuestionName",
    "InvalidBaseUrl",
    "InvalidModel",
    "InvalidName",
    "InvalidOption",
    "InvalidQuestion",
    "InvalidResponse",
    "InvalidState",
    "MissingApiKey",
    "Model",
    "ModelList",
    "NamedQuestion",
    "NoQuestions",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "QAError",
    "Questions",
    "RateLimit",
    "RateLimited",
    "Request",
    "RequestTimeout",
    "RetryBudget",
    "RetryPolicy",
    "Score",
    "ServerError",
    "ServiceBusy",
    "Unauthorized",
    "UnexpectedStatus",
    "UnprocessableEntity",
    "ValidationError",
    "YesNo",
    "__version__",
]


def __getattr__(name: str) -> object:
    # Loaded on first use: dataclasses and concurrent.futures would double the import time.
    if name == "RetryPolicy":
        from ._retry import RetryPolicy

        return RetryPolicy
    if name == "Call":
        from ._futures import Call

        return Call
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"RetryPolicy", "Call"})
