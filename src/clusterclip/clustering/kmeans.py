"""Spherical (cosine) or euclidean K-means over embeddings streamed in chunks.

:class:`KMeans` checks its parameters and input, runs a backend and records
the fitted attributes (only :meth:`KMeans.fit` sets them). The numeric work
lives in pure modules: :mod:`._passes` (assignment pass, M-step, re-seeding,
:func:`assign`), :mod:`._kmeanspp` (initialisation), :mod:`._lloyd` (the torch
backend's restarts of Lloyd's loop) and :mod:`._faiss` (``faiss.Kmeans``).

The torch backend runs on CPU or CUDA and never needs the N x d matrix in
memory. Under ``torch.distributed`` each process passes its own contiguous
shard of rows; sums, counts and the objective are all-reduced every
iteration, so every rank holds the same centroids and the labels equal a
single-process run.

Objective: the mean cosine similarity of each row to its centroid (cosine,
maximised) or the mean squared euclidean distance (euclidean, minimised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from clusterclip import distributed as D
from clusterclip.clustering._lloyd import fit_torch
from clusterclip.clustering._passes import DEFAULT_CHUNK_ROWS, DEFAULT_METRIC, METRICS, assign
from clusterclip.clustering._rows import check_matrix
from clusterclip.errors import InputError
from clusterclip.limits import MAX_ROWS, MAX_SEED, check_ranges, ranged

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "DEFAULT_CHUNK_ROWS", "DEFAULT_MAX_ITER",
           "DEFAULT_METRIC", "DEFAULT_N_INIT", "DEFAULT_TOL", "METRICS", "KMeans",
           "KMeansSettings", "assign", "default_fit_sample"]

BACKENDS = ("torch", "faiss")
#: The defaults of the k-means knobs, said here once (the commands, options and stages read
#: them): iterations, restarts, tolerance and backend (the metric and rows streamed per
#: chunk: ``DEFAULT_METRIC``, ``DEFAULT_CHUNK_ROWS``, with :func:`assign`).
DEFAULT_MAX_ITER = 50
DEFAULT_N_INIT = 1
DEFAULT_TOL = 1e-4
DEFAULT_BACKEND = "torch"
#: The commands fit on every valid row up to this many rows, on a sample above it
#: (measured in docs/benchmarks.md, "K-means on a sample").
FULL_FIT_MAX_ROWS = 2_000_000
#: Rows of that sample: at least this many, and at least SAMPLE_ROWS_PER_CLUSTER per cluster.
SAMPLE_MIN_ROWS = 1_000_000
SAMPLE_ROWS_PER_CLUSTER = 1024


def default_fit_sample(n_valid: int, n_clusters: int) -> int:
    """Rows the commands fit k-means on when not told (0: every row): every valid row up
    to :data:`FULL_FIT_MAX_ROWS`, else a seeded sample of ``max(SAMPLE_MIN_ROWS,
    SAMPLE_ROWS_PER_CLUSTER x K)`` rows (every row when that is not fewer)."""
    if n_valid <= FULL_FIT_MAX_ROWS:
        return 0
    m = max(SAMPLE_MIN_ROWS, SAMPLE_ROWS_PER_CLUSTER * int(n_clusters))
    return 0 if m >= n_valid else m


@dataclass(frozen=True, kw_only=True)
class KMeansSettings:
    """The k-means settings besides K, declared once: :class:`KMeans` takes each as a
    keyword of the same name and default, the stage options
    (:class:`clusterclip.stages.cluster.KMeansOptions`) extend them, and the command line
    builds its options (``--iters`` sets ``max_iter``, ``--kmeans-device`` ``device``) and
    reads them back from these fields. ``device`` and ``chunk_rows`` do not change the
    result. Checked when made (InputError naming the parameter): in their ranges, which the
    command line's options show, and as :meth:`KMeans.fit` checks them.

    Examples
    --------
    >>> KMeansSettings(n_init=3).kmeans()["n_init"]
    3
    >>> KMeansSettings(n_init=0)
    Traceback (most recent call last):
    ...
    clusterclip.errors.InputError: n_init: 0 is out of range (an integer in 1 .. 10000)
    """

    max_iter: int = ranged(1, 1_000_000, default=DEFAULT_MAX_ITER)
    n_init: int = ranged(1, 10_000, default=DEFAULT_N_INIT)
    tol: float = ranged(0.0, 1.0, real=True, default=DEFAULT_TOL)
    metric: str = DEFAULT_METRIC
    backend: str = DEFAULT_BACKEND
    seed: int = ranged(0, MAX_SEED, default=0)
    device: str = "cpu"
    chunk_rows: int = ranged(1, MAX_ROWS, default=DEFAULT_CHUNK_ROWS)

    def __post_init__(self) -> None:
        check_ranges(self)  # the settings' ranges (those of the command line's options)
        KMeans(1, **self.kmeans())._check_params()  # K is the stage's, checked there

    def kmeans(self) -> dict[str, Any]:
        """The keywords of :class:`KMeans`: every setting, by name."""
        return {f.name: getattr(self, f.name) for f in fields(KMeansSettings)}


class KMeans:
    """K-means over (N, d) embeddings, streamed in chunks; spherical by default.

    The parameters are checked by [`fit`][clusterclip.clustering.KMeans.fit]
    (scikit-learn's convention), which alone sets the fitted attributes (the names
    that end in an underscore).

    Parameters
    ----------
    n_clusters : int
        Number of clusters K, 1 <= K <= number of valid rows.
    max_iter : int
        Maximum number of centroid updates, >= 0.
    n_init : int
        Restarts from different seeds, >= 1; the best objective is kept.
    tol : float
        Stop when the relative change of the objective falls below ``tol`` (>= 0).
    metric : str
        ``"cosine"``: spherical K-means (unit-norm centroids, cosine similarity);
        ``"euclidean"``: squared euclidean distance.
    seed : int
        Seed of the initialisation, >= 0; the same seed gives the same labels.
    device : str
        Torch device (``"cpu"``, ``"cuda"``, ...) for the torch backend.
    chunk_rows : int
        Rows read from the input at a time (bounds memory use).
    backend : str
        ``"torch"`` or ``"faiss"``. ``"faiss"`` runs ``faiss.Kmeans``: it needs
        faiss installed, holds the valid rows in memory, runs in a single process
        only and ignores ``tol``.
    init : str or numpy.ndarray
        ``"k-means++"`` (on a seeded sample of rows) or a (K, d) array of initial
        centroids.
    progress : bool
        Show a progress bar (stderr) per iteration.
    fit_sample : int or None
        None: fit on every valid row. Or a number of rows m >= K: below the number
        of valid rows, k-means++ and Lloyd run on a seeded sample of m valid rows
        (the same sample under any number of ranks), then one streamed assignment
        pass labels every row (torch backend only).

    Attributes
    ----------
    cluster_centers_ : numpy.ndarray
        float32 (K, d) centroids; unit-norm in cosine mode.
    labels_ : numpy.ndarray
        int32 (n,) cluster of each row, -1 for rows that are not valid.
    scores_ : numpy.ndarray
        float32 (n,): cosine similarity to the assigned centroid (cosine) or minus
        the euclidean distance to it (euclidean); 0 for rows not valid.
    objective_history_ : list of float
        The objective after each assignment pass (first entry: the initial
        centroids); cosine: mean similarity, euclidean: mean squared distance. With
        ``fit_sample``, the sample's.
    objective_ : float
        The final objective, on every valid row.
    inertia_ : float
        Sum of squared euclidean distances of the valid rows to their centroids
        (rows L2-normalised in cosine mode).
    n_iter_ : int
        Centroid updates done in the kept run.
    reseeds_ : list of int
        Empty clusters re-seeded at each update of the kept run.
    empty_clusters_ : int
        Clusters still empty at the end (only when there are fewer distinct rows
        than K).
    init_seconds_, init_cpu_seconds_ : float
        Wall and CPU time spent initialising (torch backend).
    fit_sample_rows_ : int or None
        Rows of the sample the centroids were fitted on (None: every valid row).
    sample_objective_ : float or None
        The objective on that sample (None without one).

    See Also
    --------
    - [`assign`][clusterclip.clustering.assign]: label rows with fixed centroids.

    Notes
    -----
    The objective is the mean cosine similarity of each row to its centroid
    (cosine, maximised) or the mean squared euclidean distance (euclidean,
    minimised). ``objective_``, ``inertia_``, ``labels_`` and ``scores_`` are always
    the full data's, with or without ``fit_sample``.

    The torch backend runs on CPU or CUDA and never needs the N x d matrix in
    memory. Under ``torch.distributed`` each process passes its own contiguous
    shard of rows; sums, counts and the objective are all-reduced every
    iteration, so every rank holds the same centroids and the labels equal a
    single-process run.

    Examples
    --------
    >>> import numpy as np
    >>> from clusterclip.clustering import KMeans
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal([5, 0], 0.1, (20, 2)),
    ...                     rng.normal([0, 5], 0.1, (20, 2))]).astype(np.float32)
    >>> km = KMeans(n_clusters=2, seed=0).fit(X)
    >>> km.cluster_centers_.shape, np.bincount(km.labels_).tolist()
    ((2, 2), [20, 20])
    >>> bool((km.predict(X)[0] == km.labels_).all())
    True
    """

    def __init__(self, n_clusters: int, max_iter: int = DEFAULT_MAX_ITER,
                 n_init: int = DEFAULT_N_INIT, tol: float = DEFAULT_TOL,
                 metric: str = DEFAULT_METRIC, seed: int = 0, device: str = "cpu",
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, backend: str = DEFAULT_BACKEND,
                 init: Any = "k-means++",
                 progress: bool = False, fit_sample: int | None = None) -> None:
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.n_init = n_init
        self.tol = tol
        self.metric = metric
        self.seed = seed
        self.device = device
        self.chunk_rows = chunk_rows
        self.backend = backend
        self.init = init
        self.progress = progress
        self.fit_sample = fit_sample

    # -- validation ------------------------------------------------------------
    def _check_params(self) -> None:
        def bad(name: str, why: str) -> InputError:
            return InputError(f"k-means: {name}={getattr(self, name)!r} {why}", params=(name,))

        if not isinstance(self.n_clusters, (int, np.integer)) or self.n_clusters < 1:
            raise bad("n_clusters", "must be an integer >= 1")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise bad("max_iter", "must be an integer >= 0")
        if not isinstance(self.n_init, (int, np.integer)) or self.n_init < 1:
            raise bad("n_init", "must be an integer >= 1")
        if not (isinstance(self.tol, (int, float)) and self.tol >= 0 and math.isfinite(self.tol)):
            raise bad("tol", "must be a finite number >= 0")
        if self.metric not in METRICS:
            raise bad("metric", f"must be one of {METRICS}")
        if self.backend not in BACKENDS:
            raise bad("backend", f"must be one of {BACKENDS}")
        if not isinstance(self.chunk_rows, (int, np.integer)) or self.chunk_rows < 1:
            raise bad("chunk_rows", "must be an integer >= 1")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise bad("seed", "must be an integer >= 0")
        if self.backend == "faiss" and self.seed > 2**31 - 1:  # a C int inside faiss
            raise bad("seed", "must be < 2**31 with backend faiss")
        if self.fit_sample is not None:
            if not isinstance(self.fit_sample, (int, np.integer)) or isinstance(
                    self.fit_sample, bool) or self.fit_sample < self.n_clusters:
                raise bad("fit_sample", f"must be an integer >= n_clusters "
                                        f"({self.n_clusters}), or None for every row")
            if self.backend == "faiss":
                raise bad("fit_sample", "works with backend torch only")

    # -- public API --------------------------------------------------------------
    def fit(self, X: np.ndarray, valid: np.ndarray | None = None) -> KMeans:
        """Cluster the rows of ``X``; set the fitted attributes.

        Parameters
        ----------
        X : numpy.ndarray
            float16 or float32 (n, d) array or memory map. Under
            ``torch.distributed``, this rank's contiguous shard of rows (every rank
            must call ``fit``).
        valid : numpy.ndarray or None
            bool (n,) mask; rows where it is False are ignored (label -1).

        Returns
        -------
        KMeans
            ``self``, fitted.

        Raises
        ------
        InputError
            If a parameter is not valid (the message names it), ``X`` is not a
            finite float matrix, ``valid`` has the wrong type or shape, or there are
            fewer valid rows than ``n_clusters``.
        """
        self._check_params()
        check_matrix(X)
        if valid is not None:
            valid = np.asarray(valid)
            if valid.dtype != np.bool_ or valid.shape != (X.shape[0],):
                raise InputError(f"valid mask: expected bool of shape ({X.shape[0]},), "
                                 f"got {valid.dtype} of shape {valid.shape}")
        d = X.shape[1]
        dims = D.all_sizes(d)
        if len(set(dims)) != 1:
            raise InputError(f"embeddings: ranks disagree on the dimension ({dims})")
        n_valid_local = int(X.shape[0] if valid is None else valid.sum())
        valid_sizes = D.all_sizes(n_valid_local)
        n_valid = sum(valid_sizes)
        if self.n_clusters > n_valid:
            raise InputError(f"k-means: n_clusters={self.n_clusters} exceeds the number of "
                             f"valid rows ({n_valid})", params=("n_clusters",))
        if not (isinstance(self.init, str) and self.init == "k-means++"):
            init = np.asarray(self.init)
            if init.shape != (self.n_clusters, d) or not np.isfinite(init).all():
                raise InputError(f"k-means: init must be 'k-means++' or a finite "
                                 f"({self.n_clusters}, {d}) array, got shape {init.shape}",
                                 params=("init",))
        kwargs = dict(n_clusters=int(self.n_clusters), max_iter=int(self.max_iter),
                      n_init=int(self.n_init), metric=self.metric, seed=int(self.seed),
                      device=self.device, chunk_rows=int(self.chunk_rows), init=self.init)
        if self.backend == "faiss":
            from clusterclip.clustering._faiss import fit_faiss

            fit = fit_faiss(X, valid, **kwargs)
        else:
            fit = fit_torch(X, valid, valid_sizes, tol=self.tol, progress=self.progress,
                            fit_sample=None if self.fit_sample is None
                            else int(self.fit_sample), **kwargs)
        # The only place that sets fitted attributes.
        self.cluster_centers_ = fit.centroids
        self.labels_ = fit.labels
        self.scores_ = fit.scores
        self.objective_history_ = fit.history
        self.objective_ = fit.objective
        self.inertia_ = fit.inertia
        self.n_iter_ = fit.n_iter
        self.reseeds_ = fit.reseeds
        self.empty_clusters_ = fit.empty
        self.init_seconds_ = fit.init_seconds
        self.init_cpu_seconds_ = fit.init_cpu_seconds
        if fit.train_seconds is not None:
            self.train_seconds_ = fit.train_seconds
        self.fit_sample_rows_ = fit.sample_rows
        self.sample_objective_ = fit.sample_objective
        self.sample_seconds_ = fit.sample_seconds
        return self

    def predict(self, X: np.ndarray, valid: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """Label the rows of ``X`` with the nearest fitted centroid.

        Parameters
        ----------
        X : numpy.ndarray
            float16 or float32 (n, d) rows.
        valid : numpy.ndarray or None
            bool (n,) mask; rows where it is False get label -1 and score 0.

        Returns
        -------
        labels : numpy.ndarray
            int32 (n,) nearest centroid of each row.
        scores : numpy.ndarray
            float32 (n,) scores, as ``scores_``.

        Raises
        ------
        RuntimeError
            If called before [`fit`][clusterclip.clustering.KMeans.fit].
        """
        if not hasattr(self, "cluster_centers_"):
            raise RuntimeError("KMeans.predict called before fit")
        return assign(X, self.cluster_centers_, metric=self.metric, device=self.device,
                      chunk_rows=self.chunk_rows, valid=valid)

    def fit_predict(self, X: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Fit on ``X`` and return ``labels_``.

        Parameters
        ----------
        X : numpy.ndarray
            float16 or float32 (n, d) rows.
        valid : numpy.ndarray or None
            bool (n,) mask; rows where it is False are ignored (label -1).

        Returns
        -------
        numpy.ndarray
            int32 (n,) cluster of each row, -1 for rows that are not valid.
        """
        return self.fit(X, valid).labels_
