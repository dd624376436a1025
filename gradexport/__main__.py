"""``python -m gradexport``: the command line of :mod:`gradexport.cli`."""

from .cli import main

raise SystemExit(main())
