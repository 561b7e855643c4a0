"""``python -m qa_min demo``: every operation against an in-process fake service.

The default command: it needs no service, no key and no network, so a newcomer sees typed
answers, runtime questions, the model list and an error with its diagnostics in one command.
"""

from __future__ import annotations

import enum

from .. import (
    Choice,
    Client,
    Diagnostics,
    NamedQuestion,
    Questions,
    Request,
    Score,
    ServiceBusy,
    YesNo,
    __version__,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ._output import Output

_DEMO_KEY = "sk-demo"
_DEMO_STATE = "The parcel arrived two weeks late and the box was crushed, but support sorted it out."

_LEVELS = ["poor", "fair", "good"]


class Tone(enum.Enum):
    formal = "Written in a formal register"
    casual = "Written casually"


class Review(Questions):
    toxic = YesNo("The text insults someone", "The text insults no one")
    tone = Choice(Tone)
    quality = Score(_LEVELS)


def _rows(out: Output, title: str, rows: Sequence[tuple[str, object]]) -> None:
    out.line(title)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"  {label.ljust(width)}  {value}")
    out.line()


def _demo_calls(client: Client) -> dict[str, Any]:
    typed = client.ask(_DEMO_STATE, Review)
    runtime = client.core(
        Request(
            _DEMO_STATE,
            [
                NamedQuestion("late", YesNo("The delivery was late", "The delivery was on time")),
                NamedQuestion("lang", Choice({"en": "English", "fr": "French"})),
            ],
        )
    )
    return {
        "ask": {
            "toxic": typed.answers.toxic,
            "tone": typed.answers.tone.name,
            "quality": typed.answers.quality,
            "usage": dict(typed.usage),
        },
        "core": {**dict(runtime.answers), "usage": dict(runtime.usage)},
        "models": [model.name for model in client.list_models()],
    }


def _demo_error(client: Client, out: Output) -> dict[str, Any]:
    diagnostics = Diagnostics()
    try:
        client.ask(_DEMO_STATE, Review, diagnostics=diagnostics)
    except ServiceBusy as exc:
        # exc.diagnostics and the Diagnostics passed in hold the same record of the call.
        return out.error_info(exc)
    raise RuntimeError("the fake service was scripted to reply 429")  # pragma: no cover


def run_demo(out: Output) -> int:
    """Every operation against an in-process fake service, printed (or as JSON)."""
    from ..testing import FakeService, reply

    with (
        FakeService(api_key=_DEMO_KEY) as service,
        Client(api_key=_DEMO_KEY, base_url=service.url, trust_env=False) as client,
    ):
        result = {"url": service.url, **_demo_calls(client)}
        # Three 429s use up the first attempt and both default retries; retry-after-ms keeps
        # the demo fast, and shows that the server's requested delay is honoured.
        busy = reply(429, {"detail": "slow down"}, headers=[("retry-after-ms", "20")])
        service.script(busy, busy, busy)
        result["error"] = _demo_error(client, out)
    if out.json:
        out.data(result)
        return 0
    out.line(f"qa_min {__version__} demo, against a fake service at {result['url']}")
    out.line(f"state: {_DEMO_STATE!r}")
    out.line("(the fake answers by a fixed hash of model, state and question id, not by reading the text)")
    out.line()
    ask = result["ask"]
    _rows(
        out,
        "client.ask(state, Review): typed answers",
        [
            ("toxic", ask["toxic"]),
            ("tone", f"Tone.{ask['tone']}"),
            ("quality", f"{ask['quality']} ({_LEVELS[ask['quality']]})"),
            ("usage", ask["usage"]),
        ],
    )
    core = dict(result["core"])
    usage = core.pop("usage")
    _rows(out, "client.core(Request(...)): questions built at run time", [*core.items(), ("usage", usage)])
    _rows(out, "client.list_models()", [("models", ", ".join(result["models"]))])
    error = result["error"]
    _rows(
        out,
        "an error: three 429 replies use up the retries, then ServiceBusy is raised",
        [
            ("error", f"{error['type']}: {error['message']}"),
            ("status", error["status"]),
            ("attempts", error["attempts"]),
            ("body", error["body"]),
        ],
    )
    return 0
