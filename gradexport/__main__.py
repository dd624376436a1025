"""``python -m gradexport``: the command line of `gradexport.cli`."""

from .cli import main

raise SystemExit(main())
