"""Benchmarks of qa_min: ``python -m benchmarks --help`` lists the modes, one line each.

``python -m benchmarks MODE ...`` runs a mode of ``cli.MODES`` (``steady`` when no mode is
named); figures live in ``benchmarks/RESULTS.md`` only. Adding a mode: write a self-contained
module with ``main(argv: list[str]) -> int`` that imports of this folder at most ``common``
(and ``fake``, to measure against the fake service in a process of its own), then add one line
to ``cli.MODES`` (alphabetical) and one quick run to ``SMOKE`` in ``tests/test_benchmarks.py``.

Imports go one way, down this list (``tests/test_architecture.py`` fails on a cycle); each module
imports only modules listed before it:

1. ``common``: the request every client sends, the replies every server gives, ``ROOT`` and the
   children's environment; it imports nothing of the folder.
2. ``tls`` (a throwaway CA for ``https://``), ``clients`` (one client's measurement loop, in a
   process of its own; imports ``common`` only, being the measured baseline), ``server`` (the
   own server, in a process of its own), ``process`` (a server process as the runner sees it),
   ``fake`` (``qa_min.testing.FakeService`` in a process of its own, with its counts).
3. ``nginx`` (nginx with a generated configuration), then ``servers`` (which servers a run uses).
4. ``run`` (the steady-state rounds and statistics) and ``cold`` (whole-process cold starts).
5. ``report`` (the markdown of both), then ``cli`` (the modes; the command line of ``steady``
   and ``cold``), then ``__main__``.

Beside them, the self-contained modes, which import ``common`` and ``fake`` at most: ``aio``
(mode ``asyncio``), ``batch``, ``engines``, ``fleet``, ``ratelimit``, ``redaction``.

This file imports nothing: every client process imports the ``benchmarks`` package before its
client library, and whatever it imported would blur the import-time and memory measurements.
"""
