"""Which mixture of my clusters should I train on, for what I care about?

``clusterclip search`` answers with small proxy models (RegMix, Nemotron-CLIMB):
candidate mixtures (cluster weights, the clip R and the timing, paced or greedy)
are each trained as a small byte-level LM with the experiment's trainer and
measured on val (the target's held-out loss, or macro loss); a regressor over
the finished proxies proposes the next round; the chosen mixture, random and the
target's prior are then trained again with fresh seeds and compared on test.

- :mod:`~clusterclip.search.splits`: corpus train/val/test, target val/test.
- :mod:`~clusterclip.search.target`: the target documents, embedded and assigned.
- :mod:`~clusterclip.search.space`: candidates, super-clusters, Dirichlet proposals.
- :mod:`~clusterclip.search.predictor`: the regressor and its leave-one-out check.
- :mod:`~clusterclip.search.core`: the rounds and the choice (objective injected).
- :mod:`~clusterclip.search.proxies`: real proxy runs, stored, shared among ranks.
- :mod:`~clusterclip.search.offline`: the offline search itself, from what the stage
  reads of a work directory (data, prior, rounds, test verdict); ``output`` and ``plots``:
  ``W/search/``.
"""

from __future__ import annotations
