"""The ``search propose`` stage: candidate mixtures of a work directory's clusters for the
user's own trainer (``W/labels.npy`` + ``W/centroids.npy`` (+ ``W/corpus/``, and with a
target ``W/embeddings.npy``) -> the ``out`` folder: ``ratios.csv``, ``mixtures/<run>.json``,
and as asked each run's exported schedule, Megatron blends or a verification round).

The options are :class:`~clusterclip.search.propose.ProposeRequest` (frozen, checked when
made, in the parameters' names); :func:`run` reads the work directory (the target's prior
and its copies in the corpus: :func:`target_guard`) and hands the search space to
:func:`clusterclip.search.propose.write_proposals` or
:func:`clusterclip.search.verify.write_verification`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from clusterclip.search.propose import ProposeRequest
from clusterclip.search.target import Target
from clusterclip.stages.search import cluster_metric, embed_record, workdir_space
from clusterclip.workdir import CENTROIDS, CORPUS, EMBEDDINGS, LABELS, Workdir


def target_guard(w: Workdir, target: Target, device: str, rows: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``(histogram, exclude, overlap)`` of a target on ``w``: its ``rows``' documents per
    cluster (the prior), and the offline search's overlap guard over all its documents
    (:mod:`clusterclip.search.overlap`: exact copies after whitespace normalisation, near
    copies by cosine at W's dedup threshold): the corpus copies of any target document,
    int64, kept out of training, and ``target_overlap``: the offline search's record
    (:func:`clusterclip.search.overlap.summary`: ``{exact, near, target_docs,
    corpus_docs_excluded, threshold, val_copies_trained}``)."""
    from clusterclip.search.overlap import find_overlap
    from clusterclip.search.overlap import summary as overlap_summary
    from clusterclip.search.target import embed_texts, target_histogram
    from clusterclip.stages.dedup import workdir_threshold
    embed = embed_record(w)
    labels, texts, corpus = w.load_inputs()
    centroids = np.asarray(w.centroids(), dtype=np.float32)
    usable = np.flatnonzero(target.usable)
    X = embed_texts(embed["params"], corpus, [target.texts[i] for i in usable], device)
    k = int(labels.max()) + 1
    at = {int(r): i for i, r in enumerate(usable)}
    histogram = target_histogram(X[[at[int(r)] for r in rows]], centroids[:k],
                                 cluster_metric(w), device)
    threshold = workdir_threshold(w)
    E = w.embeddings()
    ov = find_overlap(target.texts, texts, X, E, usable, threshold)
    copies = ov.copies_of(usable, labels.size)  # all of them: no copy is ever trained on
    return (histogram, np.flatnonzero(copies).astype(np.int64),
            overlap_summary(ov, copies, val_kept=False))


def _write_split(target: Target, val: np.ndarray, test: np.ndarray) -> Callable[[Any], None]:
    """What writes the target's halves as ``target_val.jsonl`` and ``target_test.jsonl``."""
    import json

    from clusterclip.storage.atomic import write_text

    def write(tmp: Any) -> None:
        for name, rows in (("target_val.jsonl", val), ("target_test.jsonl", test)):
            write_text(tmp / name, "".join(json.dumps({"text": target.texts[int(i)]},
                                                      ensure_ascii=False) + "\n"
                                           for i in rows))
    return write


def run(w: Workdir, options: ProposeRequest, log: Callable[[str], None] | None = None
        ) -> dict[str, Any]:
    """``search propose`` on ``w`` (the work directory of ``options.workdir``, see
    :mod:`clusterclip.search.propose`); returns a summary; ``log``: the progress lines of
    the exports (default: stderr). Every input and the ``out`` folder are checked before
    anything is written."""
    from clusterclip.search.propose import export_tokenizer, write_proposals
    from clusterclip.search.target import read_target
    from clusterclip.storage.outputs import check_output_dir

    req = options
    chosen = None
    if req.verify is not None:
        from clusterclip.search.verify import check_verify_folder

        chosen = check_verify_folder(req.verify)
    target = read_target(list(req.targets), req.text_field) if req.targets else None
    tokenizer = export_tokenizer(req)
    check_output_dir(req.out, "search propose")
    with w.locked():
        w.upstream([LABELS, CENTROIDS]
                   + ([CORPUS] if req.fmt or req.num_tokens or target or req.blend else [])
                   + ([EMBEDDINGS] if target else []))  # the overlap guard's
        histogram = exclude = overlap = extra = None
        if target is not None:
            rows = np.flatnonzero(target.usable)
            if req.split_target:
                from clusterclip.search.splits import target_splits

                rows, test = target_splits(target.rows_per_file, target.usable, req.seed)
                extra = _write_split(target, rows, test)
            histogram, exclude, overlap = target_guard(w, target, req.device, rows)
        if chosen is not None:  # its own exclusions stay, with the target's
            from clusterclip.sampling.mixture import read_exclusions

            kept = read_exclusions(chosen, int(w.labels().size))
            exclude = np.union1d(kept, np.zeros(0, np.int64) if exclude is None else exclude)
        ws = workdir_space(w.root, num_tokens=req.num_tokens,
                           num_samples=req.num_samples,
                           tokenizer=req.tokenizer if req.num_tokens else None,
                           histogram=histogram, exclude=exclude, overlap=overlap)

        if chosen is not None:
            from clusterclip.search.verify import write_verification

            return write_verification(req, ws, chosen, w.corpus, tokenizer, log, extra)
        return write_proposals(req, ws, w.corpus, tokenizer, target is not None, log, extra)
