"""Questions from the command line: ``--questions FILE.json``, ``--yes-no``, ``--choice``, ``--score``.

The parser collects the four options, in command-line order, into one list of
``(kind, values)``; `collect_questions` turns that list into the questions of a request.
"""

from __future__ import annotations

import json

from .. import Choice, InvalidQuestion, NamedQuestion, NoQuestions, Request, Score, ValidationError, YesNo

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

QUESTIONS_HELP = """\
questions file (--questions FILE.json): one JSON object, question id -> question, each question
an object with exactly one of these keys:
  {"toxic":   {"yes_no": ["The text insults someone", "The text insults no one"]},
   "lang":    {"choice": {"en": "English", "fr": "French"}},
   "quality": {"score":  ["poor", "fair", "good"]}}
Questions are asked in command-line order, files and flags alike; ids must be unique, and so
must the option keys of a choice (a key given twice in a file's object is refused, too), the
texts of a question's answers and the level texts of a score.
--choice and --score take several values: put the state (or input file) first, or after `--`.

"""


class _DuplicateKey(Exception):
    """A JSON object of a questions file holds one key twice, which ``json.load`` would drop."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of ``json.load``: the object, or `_DuplicateKey` naming a repeated key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _question_from_json(spec: object) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise InvalidQuestion('expected an object with one key: "yes_no", "choice" or "score"')
    ((kind, criteria),) = spec.items()
    if kind == "yes_no":
        if not isinstance(criteria, list) or len(criteria) != 2:
            raise InvalidQuestion('"yes_no" takes a list [yes text, no text]')
        return YesNo(criteria[0], criteria[1])
    if kind == "choice":
        if not isinstance(criteria, dict):
            raise InvalidQuestion('"choice" takes an object {option: description, ...}')
        return Choice(criteria)
    if kind == "score":
        if not isinstance(criteria, list):
            raise InvalidQuestion('"score" takes a list of level texts')
        return Score(criteria)
    raise InvalidQuestion(f'unknown kind {kind!r}: expected "yes_no", "choice" or "score"')


def questions_from_file(path: str) -> list[NamedQuestion]:
    """The questions of a JSON questions file (format in ``--help``).

    Raises:
        InvalidQuestion: The file cannot be read, is not JSON, or a question is malformed.
    """
    try:
        # utf-8-sig: a BOM (as Windows editors save UTF-8) is no reason to refuse the file.
        with open(path, encoding="utf-8-sig") as file:
            doc = json.load(file, object_pairs_hook=_unique_keys)
    except OSError as exc:
        raise InvalidQuestion(f"cannot read questions file {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidQuestion(f"questions file {path!r} is not JSON: {exc}") from None
    except _DuplicateKey as exc:
        raise InvalidQuestion(
            f"questions file {path!r}: key {exc.args[0]!r} is given twice in one object; keys must be unique"
        ) from None
    if not isinstance(doc, dict):
        raise InvalidQuestion(f"questions file {path!r} must hold a JSON object of id -> question")
    questions = []
    for name, spec in doc.items():
        try:
            questions.append(NamedQuestion(name, _question_from_json(spec)))
        except ValidationError as exc:
            raise InvalidQuestion(f"questions file {path!r}, question {name!r}: {exc.message}") from None
    return questions


def _question_from_flag(kind: str, values: list[str]) -> NamedQuestion:
    name, rest = values[0], values[1:]
    if kind == "yes_no":
        return NamedQuestion(name, YesNo(rest[0], rest[1]))
    if kind == "score":
        return NamedQuestion(name, Score(rest))
    options = {}
    for item in rest:
        key, sep, text = item.partition("=")
        if not sep:
            raise InvalidQuestion(f"--choice {name}: expected KEY=TEXT, got {item!r}")
        if key in options:
            raise InvalidQuestion(
                f"--choice {name}: option {key!r} is given twice; option keys must be unique"
            )
        options[key] = text
    return NamedQuestion(name, Choice(options))


def collect_questions(args: argparse.Namespace) -> list[NamedQuestion]:
    """Every question the command line asks for, files and flags in their order.

    Raises:
        ValidationError: No question, a malformed one, or two with the same id.
    """
    questions: list[NamedQuestion] = []
    for kind, values in args.questions or []:
        if kind == "file":
            questions.extend(questions_from_file(values[0]))
        else:
            questions.append(_question_from_flag(kind, values))
    if not questions:
        raise NoQuestions("no questions: pass --questions FILE.json, --yes-no, --choice or --score")
    # Validates names and duplicates once, before any state is read or sent.
    Request("-", questions)
    return questions
