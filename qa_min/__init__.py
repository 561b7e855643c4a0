"""qa_min: a zero-dependency client for the question-answering service.

    import qa_min as qa

    class Review(qa.Questions):
        toxic = qa.YesNo("The text insults someone", "The text insults no one")

    with qa.Client(base_url="http://127.0.0.1:8080") as client:
        print(client.ask("Some text", Review).answers.toxic)

Only the question, error and client classes load with ``import qa_min``; the transport loads
with the first ``Client``, and ``RetryPolicy``, ``Call`` and ``AsyncClient`` (with asyncio) on
first use, so that importing the package stays cheap. ``qa_min.testing`` holds a fake service
to test against.
"""

from __future__ import annotations

from ._call import CancelToken, RetryBudget
from ._client import Client
from ._constants import DEFAULT_MODEL, PUBLIC_BASE_URL, __version__
from ._diagnostics import Attempt, ResponseHeaders
from ._errors import (
    APIStatusError,
    BadFraming,
    BadRequest,
    Canceled,
    ClientClosed,
    ConfigurationError,
    ConnectionFailed,
    Diagnostics,
    DuplicateQuestionName,
    IncompleteMessage,
    InvalidBaseUrl,
    InvalidModel,
    InvalidName,
    InvalidOption,
    InvalidQuestion,
    InvalidResponse,
    InvalidState,
    LimitExceeded,
    MalformedHead,
    MissingApiKey,
    NoQuestions,
    NotFound,
    Overloaded,
    PermissionDenied,
    ProtocolError,
    ProxyError,
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
from ._hooks import HookEvent
from ._questions import Choice, Questions, Score, YesNo
from ._ratelimit import RateLimit
from ._request import NamedQuestion, Request
from ._responses import AskResponse, CoreResponse, Model, ModelList

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._aclient import AsyncClient as AsyncClient
    from ._futures import Call as Call
    from ._retry import RetryPolicy as RetryPolicy

__all__ = [
    "DEFAULT_MODEL",
    "PUBLIC_BASE_URL",
    "APIStatusError",
    "AskResponse",
    "AsyncClient",
    "Attempt",
    "BadFraming",
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
    "HookEvent",
    "IncompleteMessage",
    "InvalidBaseUrl",
    "InvalidModel",
    "InvalidName",
    "InvalidOption",
    "InvalidQuestion",
    "InvalidResponse",
    "InvalidState",
    "LimitExceeded",
    "MalformedHead",
    "MissingApiKey",
    "Model",
    "ModelList",
    "NamedQuestion",
    "NoQuestions",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "ProtocolError",
    "ProxyError",
    "QAError",
    "Questions",
    "RateLimit",
    "RateLimited",
    "Request",
    "RequestTimeout",
    "ResponseHeaders",
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
    if name == "AsyncClient":
        # asyncio loads with the first use of AsyncClient, never with ``import qa_min``.
        from ._aclient import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"RetryPolicy", "Call", "AsyncClient"})
