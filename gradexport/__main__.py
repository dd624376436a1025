"""``python -m gradexport``: the command line of `gradexport.frontends.cli`."""

from .frontends.cli import main

raise SystemExit(main())
