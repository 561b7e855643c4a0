"""``python -m benchmarks``: see ``python -m benchmarks --help`` and ``python -m benchmarks cold --help``."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
