"""``python -m gangsched``: the same command line as ``gangsched``."""

from .cli import main

raise SystemExit(main())
