"""``python -m benchmarks``: see ``python -m benchmarks --help`` and ``python -m benchmarks cold --help``;
``python -m benchmarks fleet`` runs fleets of processes sharing one rate limit (``benchmarks.fleet``)."""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["fleet"]:
    from .fleet import main as fleet_main

    raise SystemExit(fleet_main(sys.argv[2:]))

from .cli import main

raise SystemExit(main())
