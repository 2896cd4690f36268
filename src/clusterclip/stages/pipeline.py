"""``clusterclip run``: the stages embed -> cluster (-> dedup) (-> sample) in one work
directory.

Each stage is skipped when the manifest says its output is current (same inputs, same
parameters), so re-running ``clusterclip run`` after a kill or with a changed downstream
parameter only does the work that is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterclip.errors import InputError
from clusterclip.stages.cluster import ClusterOptions
from clusterclip.stages.dedup import DedupOptions
from clusterclip.stages.embed import EmbedOptions
from clusterclip.stages.sample import SampleOptions
from clusterclip.workdir import Workdir


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Every stage ``run`` runs, each with its options (checked when made, as is their
    combination; InputError naming the parameter). ``sample``: None for no sampling
    stage; ``dedup``: None for no dedup stage (with it, ``sample.groups`` clips by the
    near-duplicate groups)."""

    embed: EmbedOptions
    cluster: ClusterOptions
    sample: SampleOptions | None = None
    dedup: DedupOptions | None = None

    def __post_init__(self) -> None:
        s = self.sample
        if s is not None and s.groups and self.dedup is None:
            raise InputError("groups needs the dedup stage (W/groups.npy)", params=("groups",))
        if self.dedup is not None and s is not None and (s.num_tokens is not None
                                                         or s.balance_by != "docs"):
            raise InputError("dedup works with num_samples and balance_by docs only "
                             "(token budgets over groups are not supported yet)",
                             params=("dedup", "num_samples", "balance_by"))

    def check_capacity(self, documents: int) -> None:
        """Refuse ``num_samples`` T above what an explicit ``clip`` R can serve on the
        ``documents`` with text (each gets a label; with dedup groups, at most as many),
        as soon as the corpus is scanned: before the embedding, not after the clustering."""
        from clusterclip.sampling.spec import CLIP_STRATEGIES, capacity_error

        s = self.sample
        if s is None or s.num_samples is None or s.clip is None \
                or s.strategy not in CLIP_STRATEGIES or s.num_samples <= s.clip * documents:
            return
        e = capacity_error(s.num_samples, s.clip, documents, "documents with text")
        raise InputError(f"{e} (strategy {s.strategy}); nothing was embedded",
                         params=e.params + ("strategy",))

    def later_stages(self) -> list[str]:
        """The stages after ``embed``, whose outputs this run may replace."""
        s = self.sample
        return ["cluster"] + (["dedup"] if self.dedup is not None else []) + (
            ["sample"] if s is not None else []) + (
            ["tokens"] if s is not None and s.tokenizer is not None else [])


def run(w: Workdir, options: RunOptions) -> dict[str, Any]:
    """Embed, cluster and optionally dedup and sample into ``w``; returns each stage's
    result by name. Under ``torchrun`` every rank calls this (rank 0 writes)."""
    from clusterclip.distributed import on_main
    from clusterclip.stages import cluster, dedup, embed, sample

    o = options
    out: dict[str, Any] = {}
    with w.locked():
        on_main(lambda: w.check_can_write(o.later_stages()))
        out["embed"] = embed.run(w, o.embed, n_clusters=o.cluster.n_clusters,
                                 check_corpus=lambda stats: o.check_capacity(stats["valid"]))
        o.check_capacity(out["embed"]["valid"])  # when the embedding was current
        out["cluster"] = cluster.run(w, o.cluster)
        if o.dedup is not None:  # its work runs on rank 0 only, as does its progress bar
            out["dedup"] = dedup.run(w, o.dedup)
        if o.sample is not None:
            out["sample"] = sample.run(w, o.sample)
    return out
