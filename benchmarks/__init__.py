"""Benchmarks of gradexport against a traversal floor and torchviz (``python -m benchmarks``).

Not part of the test suite and not installed with the package: run from the
repository root. :mod:`benchmarks.generators` builds the graphs,
:mod:`benchmarks.tasks` says what is timed, :mod:`benchmarks.worker` measures
one graph in its own process, :mod:`benchmarks.report` writes the table and
the plot. The method and the latest numbers are on the docs site's
performance page (``docs/performance.md``).
"""
