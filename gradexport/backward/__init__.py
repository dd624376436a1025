"""Running backward: the replay, the recorded real backward, and the non-finite search.

- `gradexport.backward.replay`: `gradexport.replay`, one ``grad_fn``
  call at a time in the engine's order; its record (`gradexport.records.Replay`)
  is `gradexport.backward.replay_record`; the order is the engine's ready
  queue, ported in `gradexport.backward.engine_queue`;
- `gradexport.backward.vjp`: the formula each step's node computed (its local
  derivative and vector–Jacobian products), with the values;
- `gradexport.backward.steps`: a record's steps as the stepping viewer
  stores them, the page's own names for its nodes, and the replay that leaves
  ``.grad`` alone (``steps=True``);
- `gradexport.backward.start_gradients`: the gradients a backward starts from;
- `gradexport.backward.gradient_stats`: the statistics kept of a gradient;
- `gradexport.backward.record_gradients`: a real backward observed by
  hooks, with a gradient record on every edge (`gradexport.record_gradients`);
- `gradexport.backward.nonfinite`: where a NaN or infinity started
  (`gradexport.find_nonfinite`);
- `gradexport.backward.watch`: gradients per parameter and module over a
  training loop (`gradexport.watch`), into the file of
  `gradexport.backward.watch_file` (`gradexport.records.load_watch`); a
  step's gradient statistics come from `gradexport.backward.watch_stats`;
- `gradexport.backward.recorder`: the flight recorder of ``watch(...,
  bad_steps=FOLDER)``, which re-runs a bad step and the last healthy step kept
  into a bundle, the file of `gradexport.backward.bundle_file`
  (`gradexport.load_bundle`; torch-free, like `watch_file`, so that the
  recorder can write it from this wing); the part of a bad step between its
  loss and the model's outputs is `gradexport.backward.recorder_loss`.

May import: core, tracing.
"""
