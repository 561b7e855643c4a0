"""Benchmarks of qa_min against raw ``http.client``, urllib3, requests and httpx.

Run ``python -m benchmarks --help``. Modules: ``server`` (the local keep-alive server, run in
its own process), ``clients`` (one client's measurement loop, run in a fresh process per
measurement), ``run`` (the orchestration and the statistics) and ``report`` (the markdown).

This file imports nothing: every client process imports the ``benchmarks`` package before its
client library, and whatever it imported would blur the import-time and memory measurements.
"""
