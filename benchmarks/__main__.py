"""``python -m benchmarks [MODE] ...``: the modes are in ``benchmarks.cli.MODES``; see ``--help``."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
