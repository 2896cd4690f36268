"""Tokens: counts per document, token-balanced cluster weights, token budgets.

Counts come from one of three sources, and every output says which:

- the **estimate** (default, free): ``ceil(characters / 4)`` per document with
  text, from the corpus index (``W/corpus`` stores each text's length in
  characters; 4 characters per token is the usual rule of thumb for English
  with a BPE tokenizer; code and other languages differ, e.g. the bundled
  Python-docs corpus has 3.4 characters per MiniLM WordPiece token);
- a **tokenizer** (``--tokenizer PATH``, a local Hugging Face fast tokenizer,
  :func:`load_tokenizer`): every text tokenized once without special tokens,
  streamed in batches, cached as ``W/tokens.npy`` (int64) by the work
  directory's ``tokens`` stage, keyed by the tokenizer's identity (a hash of
  its serialised definition) and the corpus index, so a rerun reuses it and a
  changed corpus or tokenizer recounts;
- a **file** (``sample --tokens T.npy``): counts you made yourself, for labels
  outside a work directory.

Excluded documents (label -1, no text) count 0 tokens.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import InputError

#: Characters per token of the estimate (the text length in the corpus index / 4).
CHARS_PER_TOKEN = 4
#: The tokens stage's output in a work directory.
TOKENS_FILE = "tokens.npy"
BALANCE_BY = ("docs", "tokens")
_BATCH = 256  # texts per tokenizer call


def load_tokenizer(path: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    """The Hugging Face tokenizer saved at ``path`` (a folder), loaded offline.

    One loader for every command that takes ``--tokenizer PATH``: nothing is
    downloaded (``local_files_only``). Raises InputError naming ``path`` when it
    is missing, is not a folder, or holds no tokenizer that
    ``transformers.AutoTokenizer`` can load.
    """
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"--tokenizer {path}: not a folder holding a Hugging Face tokenizer")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InputError("--tokenizer needs transformers; install the `embed` extra "
                         "(pip install 'clusterclip[embed]')") from None
    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True,
                                             trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise InputError(f"--tokenizer {path}: cannot load a tokenizer ({first})") from None


# -- counting ------------------------------------------------------------------------------
def estimate_tokens(text_lengths: Any, valid: Any) -> np.ndarray:
    """int64[N] estimated tokens: ``ceil(characters / 4)`` where ``valid``, else 0."""
    chars = np.asarray(text_lengths, dtype=np.int64)
    return np.where(np.asarray(valid, dtype=bool), -(-chars // CHARS_PER_TOKEN), 0)


def tokenizer_identity(tokenizer: Any) -> str:
    """SHA-256 of a fast tokenizer's serialised definition (vocabulary, merges,
    normalizer, pre-tokenizer, ...) and its class: equal for equal tokenizers,
    wherever they are stored."""
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(f"--tokenizer: {type(tokenizer).__name__} is not a fast tokenizer "
                         f"(counting needs the `tokenizers` backend, tokenizer.json)")
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    h.update(tokenizer.backend_tokenizer.to_str().encode())
    return h.hexdigest()


def count_tokens(texts: Iterable[tuple[int, str | None]], n: int, tokenizer: Any, *,
                 progress: bool = False, batch_size: int = _BATCH) -> np.ndarray:
    """int64[n] tokens per document of ``texts`` ((index, text or None) pairs, streamed).

    Each text is tokenized without special tokens and without truncation, in
    batches of ``batch_size``; None (excluded) counts 0.
    """
    from tqdm import tqdm

    out = np.zeros(n, dtype=np.int64)
    idx: list[int] = []
    batch: list[str] = []

    def flush() -> None:
        enc = tokenizer(batch, add_special_tokens=False, truncation=False, padding=False,
                        return_attention_mask=False, return_token_type_ids=False,
                        verbose=False)["input_ids"]
        out[idx] = [len(e) for e in enc]
        idx.clear()
        batch.clear()

    with tqdm(total=n, desc="counting tokens", unit="doc", disable=not progress,
              leave=False) as bar:
        for i, text in texts:
            if text is not None:
                idx.append(i)
                batch.append(text)
                if len(batch) >= batch_size:
                    flush()
            bar.update()
        if batch:
            flush()
    return out


def _corpus(w: Any) -> Any:
    from clusterclip.corpus import Corpus

    path = w.path("corpus")
    if not path.is_dir():
        raise InputError(f"{path}: missing, so no token counts (run `clusterclip embed` first, "
                         f"or give --tokens T.npy)")
    return Corpus.load(path)


def workdir_tokens(w: Any, tokenizer: str | os.PathLike[str] | None = None, *,
                   progress: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Tokens per document of work directory ``w``'s corpus, and where they came from.

    Without ``tokenizer``: the estimate from ``W/corpus``. With it: the
    ``tokens`` stage (``W/tokens.npy``, counted once per corpus and tokenizer).
    Returns ``(int64[N], source)``; ``source`` is ``{"method": "estimate",
    "chars_per_token": 4}`` or ``{"method": "tokenizer", "tokenizer": PATH,
    "identity": SHA256}``.
    """
    if tokenizer is None:
        corpus = _corpus(w)
        return (estimate_tokens(corpus.text_lengths, corpus.valid),
                {"method": "estimate", "chars_per_token": CHARS_PER_TOKEN})
    from clusterclip.distributed import is_main

    tok = load_tokenizer(tokenizer)
    ident = tokenizer_identity(tok)
    source = {"method": "tokenizer", "tokenizer": str(Path(tokenizer).resolve()),
              "identity": ident}

    def work(run: Any) -> dict[str, Any] | None:
        if not is_main():
            return None
        from clusterclip.io import save_npy

        corpus = _corpus(w)
        corpus.verify_files()
        counts = count_tokens(corpus.iter_texts(), len(corpus), tok, progress=progress)
        save_npy(w.path(TOKENS_FILE), counts)
        return {**source, "documents": int(counts.size), "total_tokens": int(counts.sum())}

    # The path is a parameter for the record only: the identity decides reuse.
    w.run_stage("tokens", key={"identity": ident}, params=source, reads=["corpus"],
                outputs=[TOKENS_FILE], work=work)
    return _load_counts(w.path(TOKENS_FILE), None), source


def recorded_tokens(w: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """What the report counts in: the counts ``W/schedule.npy`` was made with when its
    ``sample`` stage recorded them (the estimate, or the tokenizer's), else
    ``W/tokens.npy`` when the ``tokens`` stage is current (the counts of the last
    ``--tokenizer``), else the estimate (source says why)."""
    used = ((w.stage("sample") or {}).get("params") or {}).get("token_counts") or {}
    rec = w.stage("tokens")
    if used.get("method") != "estimate" and rec is not None and w.path(TOKENS_FILE).is_file():
        try:
            w.require("tokens")
        except InputError as e:
            counts, source = workdir_tokens(w)
            return counts, {**source, "note": f"W/{TOKENS_FILE} not used: {e}"}
        params = rec.get("params") or {}
        return (_load_counts(w.path(TOKENS_FILE), None),
                {"method": "tokenizer", "tokenizer": params.get("tokenizer"),
                 "identity": params.get("identity"), "file": str(w.path(TOKENS_FILE))})
    return workdir_tokens(w)


def _load_counts(path: str | os.PathLike[str], n: int | None) -> np.ndarray:
    from clusterclip.io import load_npy

    a = load_npy(path, "token counts", kinds="iu", ndim=1)
    if n is not None and a.size != n:
        raise InputError(f"{path}: {a.size} token counts but the labels have {n} documents")
    if a.size and int(a.min()) < 0:
        raise InputError(f"{path}: token counts must be >= 0, got {int(a.min())} at index "
                         f"{int(np.argmin(a))}")
    a = a.astype(np.int64, copy=False)
    # the exact total (32-bit halves summed apart): counts whose sum int64 cannot hold are
    # no real corpus, and every total, cumulative sum and message below would wrap
    total = (int((a >> 32).sum(dtype=np.uint64)) << 32) + int((a & 0xFFFFFFFF).sum(
        dtype=np.uint64))
    if total > np.iinfo(np.int64).max:
        raise InputError(f"{path}: token counts sum to {total:,}, more than int64 holds "
                         f"({np.iinfo(np.int64).max:,}); not a corpus's token counts")
    return a


def load_token_counts(path: str | os.PathLike[str], num_documents: int) -> np.ndarray:
    """``--tokens T.npy``: int64[N] counts, checked (1-D integers >= 0, one per document)."""
    return _load_counts(path, num_documents)


# -- weights and budgets -----------------------------------------------------------------
def token_balanced_weights(labels: np.ndarray, doc_tokens: np.ndarray, alpha: float = 0.0,
                           num_clusters: int | None = None) -> np.ndarray:
    """Cluster choice weights that balance clusters by *tokens* instead of documents.

    A cluster sampler picks cluster k with weight w_k and then one document of
    it, so cluster k receives tokens in proportion to w_k * m_k, where m_k is
    its mean document length in tokens. With ``w_k = n_k ** alpha / m_k`` the
    expected tokens per cluster are proportional to ``n_k ** alpha`` (equal
    for alpha = 0), which is the document-balanced rule restated in tokens.

    ``labels``: int[N] (-1 excluded); ``doc_tokens``: int[N] tokens per document.
    Returns float64[K] (K = ``num_clusters`` or max label + 1), normalised to
    sum 1; clusters without documents get weight 0. A cluster with documents
    but no tokens is an InputError (no weight makes it supply tokens).
    """
    labels = np.asarray(labels)
    doc_tokens = np.asarray(doc_tokens, dtype=np.float64)
    k = int(num_clusters if num_clusters is not None else labels.max(initial=-1) + 1)
    use = labels >= 0
    counts = np.bincount(labels[use], minlength=k).astype(np.float64)
    tokens = np.bincount(labels[use], weights=doc_tokens[use], minlength=k)
    silent = np.flatnonzero((counts > 0) & (tokens <= 0))
    if silent.size:
        c = int(silent[0])
        raise InputError(f"--balance-by tokens: cluster {c} has {int(counts[c])} documents "
                         f"but 0 tokens")
    weights = np.zeros(k, dtype=np.float64)
    ok = counts > 0
    mean_tokens = tokens[ok] / counts[ok]
    weights[ok] = counts[ok] ** alpha / mean_tokens
    total = weights.sum()
    if not total > 0:
        raise InputError("--balance-by tokens: no cluster has any tokens")
    return weights / total


def schedule_tokens(sampler: Any, doc_tokens: np.ndarray, block: int = 1 << 16) -> int:
    """Total tokens of the documents a (fresh) sampler serves, repeats counted."""
    return sum(int(doc_tokens[b].sum()) for b in sampler.blocks(block))


def schedule_length_for_tokens(make_sampler: Callable[[int], Any], doc_tokens: np.ndarray,
                               needed: int, t_max: int, *, exact: bool = False) -> int:
    """Schedule length T whose own schedule supplies ``needed`` tokens, at most ``t_max``.

    For strategies whose schedule depends on T (``paced`` spreads each cluster
    over the whole schedule), training on a prefix of a longer schedule would
    feed a different mixture than the strategy defines. Starting from the
    length at the mean document length, T doubles until the schedule's
    documents hold ``needed`` tokens, then a bisection finds a T within 0.5%
    of the shortest that does (what is left unfed is at most that), or with
    ``exact`` a T whose schedule supplies ``needed`` while T - 1's does not;
    deterministic, as each try is. Returns ``t_max`` when even it falls short.
    """
    lengths = np.asarray(doc_tokens).astype(np.int64)

    def supplies(t: int) -> bool:
        return schedule_tokens(make_sampler(t), lengths) >= needed

    # Grow from a guess until enough, then bisect to within 0.5% of the shortest such T.
    lo, hi = 0, min(t_max, max(1, math.ceil(needed / max(1.0, float(lengths.mean())))))
    while not supplies(hi):
        if hi >= t_max:
            return t_max
        lo, hi = hi, min(t_max, 2 * hi)
    while hi - lo > (1 if exact else max(1, hi // 200)):
        mid = (lo + hi) // 2
        if supplies(mid):
            hi = mid
        else:
            lo = mid
    return hi


def first_reaching(blocks: Iterable[np.ndarray], doc_tokens: np.ndarray,
                   num_tokens: int) -> tuple[int, int] | None:
    """``(n, tokens)``: the first n positions of the stream of ``blocks`` whose tokens
    reach ``num_tokens`` (and the tokens they hold); None when the stream falls short."""
    pos, have = 0, 0
    for b in blocks:
        cum = np.cumsum(doc_tokens[b]) + have
        i = int(np.searchsorted(cum, num_tokens, side="left"))
        if i < cum.size:
            return pos + i + 1, int(cum[i])
        pos, have = pos + b.size, int(cum[-1]) if cum.size else have
    return None


def budget_length(labels: np.ndarray, doc_tokens: np.ndarray, num_tokens: int, *,
                  strategy: str, clip: int | None, **sampler_kwargs: Any
                  ) -> tuple[int, int, int]:
    """``(T, n, tokens)`` for a budget of ``num_tokens``: the sampler's ``num_samples`` T,
    the schedule's end n <= T (the first position whose cumulative tokens reach the
    budget) and the tokens of those n positions.

    The schedule of most strategies does not depend on T (a longer one extends a
    shorter one), so T = n. ``paced`` (LENGTH_DEPENDENT_STRATEGIES) spreads its
    quotas over T: T is found first (:func:`schedule_length_for_tokens`, exact:
    T's schedule reaches the budget and T - 1's does not), and the schedule then
    ends where it first reaches the budget, which may cut the last few positions
    of T's schedule (the draws placed last: n < T). Raises InputError, with the
    numbers, when a clipped strategy cannot supply the budget.
    """
    from clusterclip.sampling.sampler import (
        CLIP_STRATEGIES,
        LENGTH_DEPENDENT_STRATEGIES,
        ClusterClipSampler,
    )

    def make(t: int) -> Any:
        return ClusterClipSampler(labels, t, strategy=strategy,
                                  **({"clip": clip} if strategy in CLIP_STRATEGIES else {}),
                                  **sampler_kwargs)

    probe = make(1)  # every sampler parameter checked before any work
    labels = np.asarray(labels)
    # the documents the sampler may draw: labelled, in a cluster of weight > 0
    drawable = (labels >= 0) & (probe.cluster_sizes > 0)[np.maximum(labels, 0)]
    tokens = np.where(drawable, np.asarray(doc_tokens, dtype=np.int64), 0)
    total = int(tokens.sum())
    if total <= 0:
        raise InputError("--num-tokens: the eligible documents hold no tokens")
    n_eligible = probe.num_eligible
    if strategy in CLIP_STRATEGIES:
        capacity = clip * n_eligible
        if num_tokens > clip * total:
            raise InputError(f"--num-tokens {num_tokens:,} exceeds what {strategy} can supply "
                             f"with --clip {clip}: {clip} x {total:,} tokens of the "
                             f"{n_eligible:,} eligible documents = {clip * total:,}; raise "
                             f"--clip or lower --num-tokens")
        t_max = capacity
    else:
        t_max = 2**62  # never reached: every draw of a document with tokens adds some

    if strategy in LENGTH_DEPENDENT_STRATEGIES:
        t = schedule_length_for_tokens(make, tokens, num_tokens, t_max, exact=True)
    else:
        t = t_max
    # Blocks about the expected length (not 2**20 positions for a budget of a few hundred).
    mean = total / max(1, n_eligible)
    block = int(min(1 << 20, max(1 << 10, 2 * num_tokens / mean)))
    got = first_reaching(make(t).blocks(block), tokens, num_tokens)
    if got is None:  # cannot happen after the capacity check; say so plainly if it does
        raise InputError(f"--num-tokens {num_tokens:,}: the {strategy} schedule of "
                         f"{t:,} positions holds fewer tokens")
    n, held = got
    return (t if strategy in LENGTH_DEPENDENT_STRATEGIES else n), n, held


def token_options(*, num_tokens: int | None, balance_by: str, tokenizer: Any = None,
                  tokens_file: Any = None) -> bool:
    """Check the token options of ``sample``/``run``; True when they need token counts.

    ``--tokenizer`` and ``--tokens`` exclude each other and apply only with
    ``--num-tokens`` or ``--balance-by tokens``.
    """
    if num_tokens is not None and num_tokens < 1:
        raise InputError(f"--num-tokens {num_tokens}: must be >= 1")
    if balance_by not in BALANCE_BY:
        raise InputError(f"--balance-by must be docs or tokens, got {balance_by!r}")
    needs = num_tokens is not None or balance_by == "tokens"
    given = [o for o, v in (("--tokenizer", tokenizer), ("--tokens", tokens_file))
             if v is not None]
    if len(given) == 2:
        raise InputError("give one of --tokenizer and --tokens, not both")
    if given and not needs:
        raise InputError(f"{given[0]} applies only with --num-tokens or --balance-by tokens")
    return needs


def check_balance(*, balance_by: str, strategy: str, alpha: float, has_weights: bool) -> None:
    """Refuse (InputError) a ``--balance-by`` that cannot apply to these sampler options."""
    from clusterclip.sampling.sampler import ALPHA_STRATEGIES

    if balance_by != "tokens":
        return
    if strategy == "random":
        raise InputError("--balance-by tokens: strategy random does not draw by cluster; "
                         "choose another strategy or --balance-by docs")
    if has_weights:
        raise InputError("--balance-by tokens computes the cluster weights; do not also "
                         "give --cluster-weights or --mixture (divide yours by the mean "
                         "tokens per document instead)")
    if strategy not in ALPHA_STRATEGIES and alpha != 0.0:
        raise InputError(f"alpha applies to {', '.join(ALPHA_STRATEGIES)} only, got "
                         f"alpha={alpha} with strategy {strategy}")


def plan_schedule(labels: np.ndarray, *, num_samples: int | None, num_tokens: int | None,
                  doc_tokens: np.ndarray | None, balance_by: str, strategy: str, clip: int,
                  alpha: float, seed: int, cluster_weights: Any) -> dict[str, Any]:
    """The sampler's length and weights for a schedule of ``num_samples`` positions or of
    ``num_tokens`` tokens, balanced by ``balance_by`` (docs or tokens); checked first.

    Returns ``num_samples`` (the sampler's T), ``stop`` (the schedule's end, <= T),
    ``cluster_weights`` (None, the given ones, or token-balanced), ``alpha`` and
    ``schedule_tokens`` (global tokens of positions [0, stop) for a token budget).
    """
    if (num_samples is None) == (num_tokens is None):
        raise InputError("give exactly one of --num-samples and --num-tokens")
    if token_options(num_tokens=num_tokens, balance_by=balance_by) and doc_tokens is None:
        raise InputError("--num-tokens and --balance-by tokens need token counts")
    labels = np.asarray(labels)
    if doc_tokens is not None and np.asarray(doc_tokens).shape != labels.shape:
        raise InputError(f"token counts for {np.asarray(doc_tokens).size} documents but "
                         f"the labels have {labels.size}")
    weights = cluster_weights
    check_balance(strategy=strategy, balance_by=balance_by, alpha=alpha,
                  has_weights=cluster_weights is not None)
    if balance_by == "tokens":
        from clusterclip.labels import check_labels

        lab = check_labels(labels)
        weights = token_balanced_weights(lab, doc_tokens, alpha, int(lab.max()) + 1)
        alpha = 0.0  # folded into the weights
    plan: dict[str, Any] = {"cluster_weights": weights, "alpha": alpha,
                            "schedule_tokens": None}
    if num_tokens is None:
        plan.update(num_samples=num_samples, stop=num_samples)
        return plan
    t, n, held = budget_length(labels, doc_tokens, int(num_tokens), strategy=strategy,
                               clip=clip, alpha=alpha, seed=seed, cluster_weights=weights)
    plan.update(num_samples=t, stop=n, schedule_tokens=held)
    return plan


def describe_source(source: dict[str, Any] | None) -> str:
    """One phrase saying where token counts came from."""
    if not source:
        return "tokens: none"
    if source["method"] == "estimate":
        return (f"estimated as ceil(characters / "
                f"{source.get('chars_per_token', CHARS_PER_TOKEN)}) per document")
    if source["method"] == "file":
        return f"counts from {source.get('file')}"
    return f"counted with the tokenizer at {source.get('tokenizer')}"


def token_summary_lines(s: dict[str, Any]) -> list[str]:
    """The summary's token lines (budget, balance, where the counts came from), if any."""
    out = []
    if s.get("balance_by") == "tokens":
        out.append("balance:     by tokens (cluster weight n_k ** alpha / mean tokens per "
                   "document)")
    if s.get("num_tokens") is not None:
        cut = (f"; the first {s['num_samples']:,} of a {s['sampler_num_samples']:,}-position "
               f"{s['strategy']} schedule" if s.get("sampler_num_samples") else "")
        out.append(f"tokens:      budget {s['num_tokens']:,}, reached at global position "
                   f"{s['num_samples']:,} ({s['schedule_tokens']:,} tokens{cut})")
    if s.get("token_counts"):
        out.append(f"token count: {describe_source(s['token_counts'])}")
    return out
