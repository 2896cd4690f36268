"""The ``sample`` stage: ``W/labels.npy`` -> ``W/schedule.npy`` (int64 document indices).

The schedule itself is :func:`clusterclip.sampling.schedule.draw_schedule` (the mixture
file, the default clip, :func:`clusterclip.sampling.write_schedule` and the summary), the
same path as ``clusterclip sample``'s; this module reads its inputs from the work
directory (labels, groups, token counts) and runs it through
:meth:`clusterclip.workdir.Workdir.run_stage`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterclip.errors import InputError
from clusterclip.sampling.clip import DEFAULT_COMMAND_STRATEGY
from clusterclip.sampling.spec import ScheduleSettings
from clusterclip.workdir import CORPUS, GROUPS, LABELS, SCHEDULE, TOKENS, Workdir

STAGE = "sample"


@dataclass(frozen=True, kw_only=True)
class SampleOptions(ScheduleSettings):
    """What the ``sample`` stage draws; checked when made (InputError naming the parameter).

    The numbers of :class:`clusterclip.sampling.spec.ScheduleSettings` (their ranges
    declared there): one of ``num_samples`` (positions) and ``num_tokens`` (a token
    budget), ``clip``, ``alpha`` and ``seed``; clusters
    balanced by ``balance_by`` (docs or tokens), token counts from ``tokenizer`` (the
    ``tokens`` stage) or the estimate. ``strategy`` and ``clip`` as resolved against the
    ``mixture`` file (:mod:`clusterclip.sampling.mixture`), whose cluster weights replace
    n_k ** alpha; ``clip`` None: the default of :func:`clusterclip.sampling.clip.default_clip`
    for the labels and budget (the summary's ``clip_default`` says which and why).
    ``groups``: clip by the near-duplicate groups of ``W/groups.npy`` (the ``dedup`` stage;
    see :mod:`clusterclip.sampling.groups`).
    """

    balance_by: str = "docs"
    tokenizer: str | None = None
    strategy: str = DEFAULT_COMMAND_STRATEGY
    mixture: str | None = None
    groups: bool = False
    progress: bool = False

    def __post_init__(self) -> None:
        from clusterclip.sampling.budget import check_balance

        super().__post_init__()  # the ranges of the numbers
        check_balance(balance_by=self.balance_by, strategy=self.strategy, alpha=self.alpha,
                      has_weights=False)
        if self.tokenizer is not None:  # a bad path fails now
            from clusterclip.tokens import load_tokenizer, tokenizer_identity

            tokenizer_identity(load_tokenizer(self.tokenizer))
        if self.mixture is not None:  # a bad file fails now, not in the stage's work
            from clusterclip.sampling.mixture import read_mixture

            try:
                read_mixture(self.mixture)
            except InputError as e:
                raise InputError(f"mixture: {e}", params=("mixture",)) from None

    @property
    def needs_tokens(self) -> bool:
        """True when the schedule needs tokens per document (a token budget or balance)."""
        return self.num_tokens is not None or self.balance_by == "tokens"


def _default_clip(w: Workdir, o: SampleOptions) -> tuple[int, str]:
    """The default clip for W's labels (and groups) under ``o`` (which gives none), and
    why."""
    from clusterclip.distributed import on_main
    from clusterclip.sampling.schedule import default_clip_for, mixture_inputs

    def resolve() -> tuple[int, str | None]:
        w.upstream([LABELS] + ([GROUPS] if o.groups else []))
        labels, weights, _ = mixture_inputs(w.labels(), o.mixture)
        return default_clip_for(labels, num_samples=o.num_samples, strategy=o.strategy,
                                alpha=o.alpha, cluster_weights=weights,
                                groups=w.groups() if o.groups else None)

    with w.locked():
        return on_main(resolve)


def run(w: Workdir, options: SampleOptions) -> dict[str, Any]:
    """Write ``W/schedule.npy`` from ``W/labels.npy`` (by
    :func:`clusterclip.sampling.schedule.draw_schedule`, as ``clusterclip sample`` does).

    Returns the sampler's summary, which is also recorded in the manifest. Under
    ``torchrun`` every rank calls this and rank 0 writes.
    """
    from clusterclip.distributed import is_main
    from clusterclip.sampling.schedule import draw_schedule
    from clusterclip.stages.tokens import TokensOptions
    from clusterclip.stages.tokens import run as run_tokens

    o = options
    clip, why = (o.clip, None) if o.clip is not None else _default_clip(w, o)
    params: dict[str, Any] = {"num_samples": o.num_samples, "strategy": o.strategy,
                              "clip": clip, "alpha": o.alpha, "seed": o.seed}
    tokens, source = run_tokens(w, TokensOptions(tokenizer=o.tokenizer, progress=o.progress)
                           ) if o.needs_tokens else (None, None)
    if o.num_tokens is not None:
        params["num_tokens"] = o.num_tokens
    if o.balance_by != "docs":
        params["balance_by"] = o.balance_by
    if source is not None:
        params["token_counts"] = source
    if o.groups:
        params["groups"] = True
    if o.mixture is not None:
        from clusterclip.sampling.mixture import mixture_record

        params["mixture"] = mixture_record(o.mixture)

    def work(run: Any) -> dict[str, Any] | None:
        if not is_main():
            return None
        return draw_schedule(w.labels(), w.path(SCHEDULE), mixture=o.mixture,
                             groups=w.groups() if o.groups else None, clip=clip,
                             clip_default=why, num_samples=o.num_samples,
                             strategy=o.strategy, alpha=o.alpha, seed=o.seed,
                             num_tokens=o.num_tokens, doc_tokens=tokens,
                             balance_by=o.balance_by, token_source=source)

    reads = [LABELS] + ([CORPUS] if o.needs_tokens else []) + (
        [TOKENS] if o.needs_tokens and o.tokenizer is not None else []) + (
        [GROUPS] if o.groups else [])
    return w.run_stage(STAGE, key=params, reads=reads, outputs=[SCHEDULE], work=work)
