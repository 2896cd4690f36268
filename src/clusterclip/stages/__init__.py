"""The stages: each runs one step of the pipeline in a work directory.

One module per stage, each with a frozen options dataclass, checked once when made
(:class:`~clusterclip.errors.InputError` naming the parameter; only the command line
speaks in flags), and ``run(w, options)`` that goes through
:meth:`clusterclip.workdir.Workdir.run_stage` (lock, upstream checks, cache, manifest):

- :mod:`~clusterclip.stages.embed`: corpus files -> ``W/corpus``, ``W/embeddings.npy``;
- :mod:`~clusterclip.stages.cluster`: -> ``W/labels.npy``, ``scores.npy``,
  ``centroids.npy`` (and the ``sweep`` stage over several K);
- :mod:`~clusterclip.stages.dedup`: -> ``W/groups.npy``, ``W/dedup.json``;
- :mod:`~clusterclip.stages.tokens`: -> ``W/tokens.npy`` (or the estimate);
- :mod:`~clusterclip.stages.sample`: -> ``W/schedule.npy``;
- :mod:`~clusterclip.stages.pipeline`: embed -> cluster (-> dedup) (-> sample);
- :mod:`~clusterclip.stages.group`: the corpus grouped by cluster into a folder;
- :mod:`~clusterclip.stages.export`: a schedule's documents (Parquet, Hugging Face, MDS,
  Megatron-LM) or the report's map (Embedding Atlas) into a folder;
- :mod:`~clusterclip.stages.report`: -> ``W/report/`` (and :mod:`~clusterclip.stages.map`:
  -> ``W/map/``, the page's map);
- :mod:`~clusterclip.stages.experiment`: -> ``W/experiment/`` (proxy LMs per strategy);
- :mod:`~clusterclip.stages.search`: -> ``W/search/`` (the mixture search and its verdict);
- :mod:`~clusterclip.stages.propose` and :mod:`~clusterclip.stages.fit`: ``search propose``
  and ``search fit``, the search with the user's own trainer (an ``out`` folder).

Only the stages and the command line import :mod:`clusterclip.workdir`; the algorithm
packages below them (corpus, embedding, clustering, sampling, dedup, tokens, grouping,
export, report, lm, experiment, search) take arrays, paths or options
(``tests/test_layers.py``).
"""
