"""``python -m qa_min``: the command line (see ``qa_min._cli``)."""

from ._cli import main

raise SystemExit(main())
