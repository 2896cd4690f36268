"""The proxy language model that ``experiment`` and ``search`` train: a small byte-level
(or tokenizer-level) transformer and everything one run of it needs.

- :mod:`~clusterclip.lm.config`: the model and optimiser settings and the size presets
  (no torch);
- :mod:`~clusterclip.lm.data`: documents to tokens, the cluster-stratified split and
  subsample, packing into training windows (numpy only);
- :mod:`~clusterclip.lm.model` and :mod:`~clusterclip.lm.train`: the model, training and
  evaluation (torch);
- :mod:`~clusterclip.lm.metrics`: held-out loss per cluster, micro / macro / tail / head,
  bits per byte, what a schedule fed;
- :mod:`~clusterclip.lm.runs`: one run on one schedule (:class:`~clusterclip.lm.runs.ScheduleSpec`,
  :class:`~clusterclip.lm.runs.Budget`) and the store of finished runs
  (:class:`~clusterclip.lm.runs.RunStore`);
- :mod:`~clusterclip.lm.runconfig`: the proxies' run configuration
  (:class:`~clusterclip.lm.runconfig.ExperimentConfig`: budget, window, split, model and
  training, mixture, tokenizer, the declared primary question and the seed rule) and the
  documents as the proxies read them; ``experiment`` and ``search`` both take it from here.

Runs in worker processes: :mod:`clusterclip.pool` (shared with the embedder and the export).

It reads no work directory: arrays, paths and options in, arrays and dicts out.
"""
