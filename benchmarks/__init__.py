"""Benchmarks of qa_min against raw ``http.client``, urllib3, requests and httpx.

Run ``python -m benchmarks --help`` (steady state) and ``python -m benchmarks cold --help``
(cold starts). Modules: ``cli`` (the command line of both), ``run`` (the steady-state rounds and
statistics), ``clients`` (one client's measurement loop, run in a fresh process per
measurement), ``cold`` (whole-process cold starts), ``report`` (the markdown), ``servers`` (which
server a run uses), ``server`` (the own server, run in its own process), ``nginx`` (nginx with a
generated configuration), ``process`` (server processes as the runner sees them) and ``tls``
(a throwaway CA for ``https://``).

This file imports nothing: every client process imports the ``benchmarks`` package before its
client library, and whatever it imported would blur the import-time and memory measurements.
"""
