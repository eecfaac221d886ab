"""``python -m popclient`` is the ``pop`` command."""

from popclient.cli import main

raise SystemExit(main())
