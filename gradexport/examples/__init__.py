"""Small programs to try gradexport on, shipped with the package so that the first command works without a checkout.

- `gradexport.examples.blog`: the blog post's two graphs, ``(x * y).sum()``
  and ``x1 + x2`` after ``x.unbind()``, in the shape the command line runs::

      gradexport gradexport.examples.blog:multiply_then_sum --format svg --output out

May import: core, tracing, backward, analysis, formats, api.
"""
