"""Pure data steps of the proxy model: tokens, the cluster-stratified split and subsample, packing.

Everything here takes and returns numpy arrays and never imports torch; only
:func:`proxy_tokenizer` reads a folder (a tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.lm.config import EOS


def encode_documents(texts: Sequence[str | None], max_doc_tokens: int
                     ) -> tuple[list[np.ndarray], np.ndarray]:
    """UTF-8 bytes of each text, truncated, each followed by :data:`EOS`.

    Long documents are *truncated*: a document keeps its first
    ``max_doc_tokens - 1`` bytes, then EOS, so that every document (plus one
    leading EOS as context) fits one training window and each one is evaluated
    from its start. A missing text (None) becomes an empty array.

    Returns ``(docs, truncated)``: ``docs[i]`` is int16[n_i] with values in
    [0, 256] (n_i <= max_doc_tokens, 0 for missing text), ``truncated`` is
    bool[N], True where bytes were cut off.
    """
    if max_doc_tokens < 2:
        raise ValueError("max_doc_tokens must be at least 2 (one byte plus EOS)")
    keep = max_doc_tokens - 1
    docs: list[np.ndarray] = []
    truncated = np.zeros(len(texts), dtype=bool)
    for i, text in enumerate(texts):
        if text is None:
            docs.append(np.zeros(0, dtype=np.int16))
            continue
        raw = text.encode("utf-8", errors="surrogatepass")
        truncated[i] = len(raw) > keep
        tokens = np.empty(min(len(raw), keep) + 1, dtype=np.int16)
        tokens[:-1] = np.frombuffer(raw[:keep], dtype=np.uint8)
        tokens[-1] = EOS
        docs.append(tokens)
    return docs, truncated


def tokenize_documents(texts: Sequence[str | None], max_doc_tokens: int, tokenizer: Any,
                       eos: int, batch_size: int = 256
                       ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """:func:`encode_documents` with a Hugging Face fast tokenizer instead of bytes: each
    text's first ``max_doc_tokens - 1`` tokens (no special tokens), then ``eos``.

    Returns ``(docs, truncated, doc_bytes)``: ``docs[i]`` int32 token ids (empty for
    missing text), ``truncated`` bool[N], ``doc_bytes`` int64[N]: the UTF-8 bytes of the
    text the kept tokens cover, plus one for the end of the document (so that for bytes
    ``doc_bytes`` is the token count and bits per byte compare across tokenizers).
    """
    keep = max_doc_tokens - 1
    n = len(texts)
    docs: list[np.ndarray] = [np.zeros(0, dtype=np.int32)] * n
    truncated = np.zeros(n, dtype=bool)
    doc_bytes = np.zeros(n, dtype=np.int64)
    idx = [i for i, t in enumerate(texts) if t is not None]
    for start in range(0, len(idx), batch_size):
        part = idx[start:start + batch_size]
        enc = tokenizer([texts[i] for i in part], add_special_tokens=False, truncation=True,
                        max_length=keep + 1, return_offsets_mapping=True, verbose=False)
        for i, ids, offs in zip(part, enc["input_ids"], enc["offset_mapping"], strict=True):
            truncated[i] = len(ids) > keep
            ids, offs = ids[:keep], offs[:keep]
            end = int(offs[-1][1]) if offs else 0
            docs[i] = np.array([*ids, eos], dtype=np.int32)
            doc_bytes[i] = len(texts[i][:end].encode("utf-8", errors="surrogatepass")) + 1
    return docs, truncated, doc_bytes


#: Share of each eligible cluster's documents held out, per held-out part.
HOLDOUT_FRACTION = 0.1
#: Clusters smaller than this stay whole in training (nothing of them to evaluate).
MIN_CLUSTER_DOCS = 10


def stratified_split(labels: np.ndarray, fraction: float = HOLDOUT_FRACTION,
                     min_cluster_docs: int = MIN_CLUSTER_DOCS, seed: int = 0, parts: int = 1
                     ) -> np.ndarray:
    """Choose ``parts`` disjoint held-out sets of documents, stratified by cluster.

    ``labels``: int[N], cluster id per document, -1 for excluded documents (never held
    out). Every cluster with ``n >= min_cluster_docs`` documents gives each part
    ``min((n - 1) // parts, max(1, round(fraction * n)))`` of its documents, chosen
    uniformly at random, so it keeps at least one training document; smaller clusters
    give none (they stay whole in training, since holding out their only documents would
    leave nothing of them to learn). Deterministic in ``seed``: one part is drawn with
    ``rng.choice`` over the cluster's members (the experiment's held-out set), more parts
    cut one ``rng.permutation`` of them into consecutive runs (the search's val and test);
    the two draws are kept as they are so that stored runs and results keep their bytes.

    Returns int8[N]: 0 for documents not held out, else the part (1 .. ``parts``).
    """
    labels = np.asarray(labels)
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if not 0.0 < fraction < 1.0 / parts:
        raise ValueError(f"fraction must be in (0, {1 / parts:g}) for {parts} part(s), "
                         f"got {fraction}")
    if min_cluster_docs < parts + 1:
        raise ValueError(f"min_cluster_docs must be at least {parts + 1}, so a cluster keeps "
                         "training documents")
    part = np.zeros(labels.shape[0], dtype=np.int8)
    rng = np.random.default_rng(seed)
    eligible = np.flatnonzero(labels >= 0)
    # stable sort: members of a cluster stay in corpus order before the draw
    order = eligible[np.argsort(labels[eligible], kind="stable")]
    _, starts, counts = np.unique(labels[order], return_index=True, return_counts=True)
    for start, n in zip(starts.tolist(), counts.tolist(), strict=True):
        if n < min_cluster_docs:
            continue
        take = min((n - 1) // parts, max(1, int(round(fraction * n))))
        members = order[start:start + n]
        if parts == 1:
            part[rng.choice(members, size=take, replace=False)] = 1
            continue
        members = rng.permutation(members)
        for j in range(parts):
            part[members[j * take:(j + 1) * take]] = j + 1
    return part


def pack_sequences(docs: Iterable[np.ndarray], seq_len: int, eos: int = EOS
                   ) -> Iterator[np.ndarray]:
    """Pack a stream of documents into fixed-length training windows.

    The token stream is one EOS followed by each document in order (each
    document already ends with EOS, see :func:`encode_documents`). Window
    ``j`` is ``stream[j * seq_len : j * seq_len + seq_len + 1]`` (int64), so
    inputs are ``w[:-1]`` and targets ``w[1:]``: every token of the stream
    after the first is a target exactly once, and documents cross window
    boundaries as in LM pre-training. A final partial window is not yielded.
    """
    if seq_len < 1:
        raise ValueError("seq_len must be positive")
    buf = np.array([eos], dtype=np.int64)
    pending: list[np.ndarray] = [buf]
    have = 1
    for doc in docs:
        if doc.size == 0:
            continue
        pending.append(doc)
        have += doc.size
        if have < seq_len + 1:
            continue
        buf = np.concatenate(pending).astype(np.int64, copy=False)
        n_windows = (buf.size - 1) // seq_len
        for j in range(n_windows):
            yield buf[j * seq_len: j * seq_len + seq_len + 1].copy()
        rest = buf[n_windows * seq_len:]  # starts with the last target, as next input
        pending = [rest]
        have = rest.size


def matched_train_sample(labels: np.ndarray, held: np.ndarray, seed: int = 0) -> np.ndarray:
    """Training documents with the same per-cluster counts as the held-out set.

    For every cluster, choose as many of its *training* documents as it has
    held-out documents, uniformly at random. The loss on this sample is
    directly comparable to the held-out loss (same cluster mix), so their
    difference is the generalisation gap. Returns int64 document indices,
    ascending.
    """
    labels = np.asarray(labels)
    held = np.asarray(held, dtype=bool)
    rng = np.random.default_rng(seed)
    chosen = []
    for k in np.unique(labels[held]):
        pool = np.flatnonzero((labels == k) & ~held)
        take = min(pool.size, int(np.count_nonzero(held & (labels == k))))
        chosen.append(rng.choice(pool, size=take, replace=False))
    if not chosen:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def stratified_subsample(labels: np.ndarray, max_docs: int, seed: int = 0) -> np.ndarray:
    """Keep at most ``max_docs`` clustered documents, each cluster keeping its share.

    ``labels``: int[N], -1 for excluded documents (never kept). When there
    are at most ``max_docs`` clustered documents all are kept. Otherwise
    cluster k keeps ``floor(max_docs * n_k / n)`` documents plus one for the
    clusters with the largest remainders (ties: smaller cluster id first), so
    exactly ``max_docs`` are kept and every cluster is within one document of
    its exact share; its documents are chosen uniformly at random
    (deterministic in ``seed``). Returns bool[N], True for kept documents.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if max_docs < 1:
        raise ValueError(f"max_docs must be >= 1, got {max_docs}")
    use = labels >= 0
    n = int(np.count_nonzero(use))
    if n <= max_docs:
        return use.copy()
    counts = np.bincount(labels[use])
    exact = counts.astype(np.float64) * max_docs / n
    quota = np.floor(exact).astype(np.int64)
    short = max_docs - int(quota.sum())
    remainder = exact - quota
    order = np.lexsort((np.arange(counts.size), -remainder))  # largest remainder, then id
    quota[order[:short]] += 1
    keep = np.zeros(labels.size, dtype=bool)
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(use)
    by_cluster = idx[np.argsort(labels[idx], kind="stable")]  # members in corpus order
    starts = np.concatenate([[0], np.cumsum(counts)])
    for k in np.flatnonzero(quota):
        members = by_cluster[starts[k]:starts[k + 1]]
        keep[rng.choice(members, size=int(quota[k]), replace=False)] = True
    return keep


def checked_labels(texts: Sequence[str | None], labels: np.ndarray,
                   groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """``labels`` as int64[N] for N = ``len(texts)``, and ``groups`` (near-duplicate group
    per document, or None) as int64[N]; InputError naming the array whose shape or type is
    wrong."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != len(texts):
        raise InputError(f"labels: expected shape ({len(texts)},), got {labels.shape}")
    labels = labels.astype(np.int64)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != labels.shape or groups.dtype.kind not in "iu":
            raise InputError(f"groups: expected int[{labels.size}], got {groups.dtype} of shape "
                             f"{groups.shape}; rerun `clusterclip dedup`")
        groups = groups.astype(np.int64)
    return labels, groups


def proxy_tokenizer(path: str) -> Any:
    """The fast tokenizer at ``path`` (:func:`clusterclip.tokens.load_tokenizer`; InputError
    naming the folder when it is not one, or not a fast one: the proxy needs offsets)."""
    from clusterclip.tokens import load_tokenizer

    tok = load_tokenizer(path)
    if not getattr(tok, "is_fast", False):
        raise InputError(f"tokenizer {path}: not a fast tokenizer (no tokenizer.json), so "
                         "the bytes each token covers are unknown", params=("tokenizer",))
    return tok
