"""``python -m gangsched``: the same command line as ``gangsched``."""

from gangsched.cli import main

raise SystemExit(main())
