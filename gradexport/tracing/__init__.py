"""From roots to the graph model: walking ``grad_fn`` and ``next_functions`` into a `networkx.MultiDiGraph`.

- `gradexport.tracing.roots`: what a user may pass as roots, checked;
- `gradexport.tracing.graph`: the graph model's schema, the walk
  (`gradexport.streams.GraphStream`) and `gradexport.to_networkx`;
- `gradexport.tracing.modules`: which ``nn.Module`` made each node
  (`gradexport.capture_modules`);
- `gradexport.tracing.checkpoints`: a reentrant checkpoint's region, re-traced
  on demand (`gradexport.tools.retrace_checkpoint`);
- `gradexport.tracing.saved`: what each node saved for backward;
- `gradexport.tracing.tensors`: small descriptions of tensors;
- `gradexport.tracing.stack`: keeping the freeing of deep graphs off the
  main thread's stack limit;
- `gradexport.tracing._torch`: the one module that touches torch's private
  API, a fence around what a torch release can break.

May import: core.
"""
