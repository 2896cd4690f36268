"""The ``search fit`` stage: the predictor fitted to the proxies' metrics of the user's own
trainer (the swarm layout), and as asked its predictions, the next round's proposals and
the chosen mixture, in the ``out`` folder; or the verdict of a verification round.

The options are :class:`~clusterclip.search.fit.FitRequest` (frozen, checked when made, in
the parameters' names); :func:`run` hands :func:`clusterclip.search.fit.fit_swarm` the
work directory's readers (:func:`~clusterclip.stages.search.workdir_space`, its clusters'
search space, and :func:`~clusterclip.stages.search.load_corpus`), so that the proposals
are mixtures of its clusters.
"""

from __future__ import annotations

from typing import Any

from clusterclip.search.fit import FitRequest, fit_swarm
from clusterclip.stages.search import load_corpus, workdir_space
from clusterclip.workdir import Workdir


def run(w: Workdir | None, options: FitRequest) -> dict[str, Any]:
    """``search fit`` (see :mod:`clusterclip.search.fit`); returns what ``fit.json`` holds,
    or with ``options.verdict`` the verdict of a verification round
    (:func:`clusterclip.search.verify.run_verdict`: ``verdict.json``, ``verdict.md``).

    ``w``: the work directory of ``options.workdir`` (its clusters are the ratios'
    columns), None without one (the columns are the user's own domains).
    """
    if (w is None) != (options.workdir is None):  # a caller's mistake, not the user's
        raise ValueError("w must be the work directory of options.workdir")
    if options.verdict:
        from clusterclip.search.verify import run_verdict

        return run_verdict(options.ratios[0], options.metrics[0], list(options.objective),
                           options.maximize, options.out)
    return fit_swarm(options, workdir_space, load_corpus)
