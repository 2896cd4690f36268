"""``report.md``: the summary as prose and tables, with the figures embedded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterclip.report.stats import repetition_bins
from clusterclip.report.terms import one_line, sample_sentence
from clusterclip.sampling.clip import LATE_TENTHS
from clusterclip.sampling.spec import DEFAULT_CLIP

# One line per sampler strategy, for the strategies a report shows.
STRATEGY_TEXT = {
    "random": "is plain multi-epoch shuffling",
    "uniform": "draws a cluster uniformly, then the next document of that cluster's pass",
    "temperature": "draws cluster k with probability proportional to n_k ** alpha",
    "clusterclip": "draws clusters as uniform does and retires a cluster after R passes",
    "paced": "gives each cluster ClusterClip's expected total (at most R passes) and spreads "
             "its draws evenly over the whole schedule",
    "mixture": "draws the mixture found by `clusterclip search` (`search/mixture.json`: its "
               "cluster weights, with its timing and clip R)",
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return out


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'").replace("<", "&lt;")


# Characters that start inline markdown (emphasis, code, links, html, tables, strike):
# backslash-escaped so that a document's text shows as written.
_INLINE = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~!#"} | {"&": "&amp;"})


def escape_inline(text: str) -> str:
    """``text`` as literal inline markdown (one line: whitespace runs become one space)."""
    return one_line(text, None).translate(_INLINE)


def _token_lines(summary: Mapping[str, Any]) -> list[str]:
    """Token shares: the smallest/largest quartiles and each cluster's range, vs the corpus."""
    from clusterclip.tokens import describe_source

    corpus = summary.get("corpus_token_shares")
    if not corpus:
        return []

    def row(name: str, s: Mapping[str, Any], tokens: str) -> list[str]:
        return [name, tokens, _pct(s["tail_quartile_token_share"]),
                _pct(s["head_quartile_token_share"]),
                f"{s['cluster_token_share_min']:.2g}..{s['cluster_token_share_max']:.2g}"]

    rows = [row(name, s, f"{s['tokens']:,}") for name, s in summary["schedules"].items()]
    rows.append(row("corpus (each document once)", corpus, f"{corpus['tokens']:,}"))
    how = describe_source(summary["token_counts"])
    return ["Measured in tokens instead of documents (a training budget is counted in tokens, "
            f"and clusters differ in document length; tokens {how}). Each cluster's token "
            "share, in each schedule and in the corpus, is in "
            "`clusters.csv` (`*_token_share` columns):",
            "",
            *_table(["schedule", "tokens", "smallest 25% share", "largest 25% share",
                     "cluster token share min..max"], rows),
            ""]


def _tenths_lines(summary: Mapping[str, Any], figures: Mapping[str, str]) -> list[str]:
    """The quartile shares per tenth of training, the starvation sentence and the figure."""
    sched = summary["schedules"]
    first = next(iter(sched.values()))
    ends = [0] + list(first["tenth_end"])
    total = ends[-1]
    cols = [f"{100 * a / total:.0f}-{100 * b / total:.0f}%" for a, b in zip(ends, ends[1:],
                                                                          strict=False)]
    rows = []
    for name, s in sched.items():
        for group, key in (("smallest 25%", "tail"), ("largest 25%", "head")):
            rows.append([name, group] + [_pct(x) for x in s[f"{key}_quartile_share_per_tenth"]]
                        + [_pct(s[f"{key}_quartile_share"])])
    starve = summary["tail_starvation"]
    n_q = summary["quartile_clusters"]
    return [
        "### Mixture over training time",
        "",
        f"Share of each tenth of the schedule drawn from the smallest 25% of clusters by size "
        f"({n_q} clusters, {_pct(summary['corpus_tail_share'])} of the documents) and from "
        f"the largest 25% ({_pct(summary['corpus_head_share'])} of the documents). Plain "
        "shuffling gives each quartile its share of the documents at every point of training.",
        "",
        *_table(["schedule", "clusters"] + cols + ["whole schedule"], rows),
        "",
        f"**Late in training.** {starve['sentence']}",
        "",
        f"![quartile shares per tenth of training]({figures['mixture']})",
        "",
    ]


def _choose_lines(choose: Mapping[str, Any], figures: Mapping[str, str],
                  sched: Mapping[str, Any]) -> list[str]:
    """The choose-R section: the rule, the recommendation and the table."""
    # The schedules at this report's R (a searched mixture has an R of its own).
    clipped = {name: s for name, s in sched.items() if "clip" in s.get("parameters", {})
               and s["parameters"].get("strategy") != "mixture"}
    at_clip = []
    if clipped:
        clip = next(iter(clipped.values()))["parameters"]["clip"]
        at_clip = [
            f"Measured at this report's R = {clip}, the smallest quartile's share of the last "
            f"{10 * LATE_TENTHS}% of the schedule: "
            + ", ".join(f"`{name}` {_pct(s['tail_quartile_share_late'])}"
                        for name, s in clipped.items())
            + ". The table below models `clusterclip`'s greedy course.",
            ""]
    measured = any("measured_tail_share" in r for r in choose["rows"])
    late = f"last {10 * LATE_TENTHS}%"
    header = ["R", "capacity R x N", "serves T?", "first clip at", "clusters clipped by T",
              "tail passes (mean)", "tail share", f"tail share, {late}", "head share"]
    if measured:
        header += ["measured tail share", f"measured tail share, {late}"]
    rows = []
    for r in choose["rows"]:
        if not r["feasible"]:
            # A clip of R cannot serve the budget: no schedule exists, so no numbers.
            rows.append([r["clip"], f"{r['capacity']:,}", "**no: R x N < T**"]
                        + ["-"] * (len(header) - 3))
            continue
        mark = " (recommended)" if r["clip"] == choose["recommended_clip"] else ""
        row = [f"**{r['clip']}**{mark}" if mark else r["clip"], f"{r['capacity']:,}", "yes",
               f"{r['first_clip_position']:,}" if r["first_clip_position"] is not None
               else "-",
               r["clusters_clipped"] if r["clusters_clipped"] else "0 (clip does not bind)",
               f"{r['tail_mean_repetition']:.2f}", _pct(r["tail_share"]),
               _pct(r["tail_share_late"]), _pct(r["head_share"])]
        if measured:
            row += [_pct(r["measured_tail_share"]) if "measured_tail_share" in r else "-",
                    _pct(r["measured_tail_share_late"]) if "measured_tail_share_late" in r
                    else "-"]
        rows.append(row)
    best = choose["recommended_clip"]
    return [
        "## Choosing the clip R for this budget",
        "",
        f"Tail = the smallest 25% of clusters ({choose['tail_clusters']} clusters, "
        f"{choose['tail_documents']:,} documents, {_pct(choose['corpus_tail_share'])} of the "
        "corpus). A clip of R repeats no document more than R times by construction, so the "
        "cap alone cannot choose R. What R changes is how long ClusterClip keeps the small "
        "clusters in the pool: a small R retires them early and ends training on the large "
        "clusters; a larger R keeps them but repeats their documents more.",
        "",
        f"**Rule:** the recommended R is {choose['rule']}. Expected values follow the "
        "sampler's mean course (every cluster in the pool drawn at its average rate; instant "
        "for any T)" + ("; the measured columns come from real ClusterClip schedules at the "
                        "same budget and seed." if measured else "."),
        "",
        (f"**Recommended R = {best}.** " if best is not None else "**No recommended R.** ")
        + choose["reason"] + " This R is for `clusterclip`'s greedy course: `paced`, the "
        "commands' default, spreads each cluster's draws over the whole schedule and takes "
        f"R = {DEFAULT_CLIP} unless T needs more.",
        "",
        *at_clip,
        *_table(header, rows),
        "",
        f"![choosing R]({figures['choose_clip']})",
        "",
    ]


def _experiment_line(summary: Mapping[str, Any]) -> str:
    exp = summary.get("experiment") or {}
    if exp.get("results_md"):
        return (f"Whether balancing helps a model on this corpus: see the experiment, "
                f"[results.md]({exp['results_md']}) (held-out loss of a small LM trained on "
                "each strategy's schedule).")
    if exp.get("command"):
        return ("No experiment in this work directory yet. To see whether balancing helps a "
                f"model on this corpus, run `{exp['command']}` (add `--quick` for a short "
                "one): it trains a small LM on each strategy's schedule and writes "
                "`experiment/results.md`, which this report links once it exists.")
    return ""


def _search_line(summary: Mapping[str, Any]) -> str:
    rel = (summary.get("search") or {}).get("results_md")
    if not rel:
        return ""
    return (f"A mixture was searched for this corpus: see the search, [results.md]({rel}) "
            "(its verdict is also on the report's page).")


def _page_lines(summary: Mapping[str, Any]) -> list[str]:
    """The link to index.html, the report as one page with the map."""
    page = summary.get("page")
    if not page:
        return []
    m = summary.get("map")
    drawn = (f"a map of {m['documents']:,} of the {m['of']:,} documents coloured by cluster, "
             if m else "")
    return [f"**The report as one page: [{page}]({page})**: {drawn}every cluster with its "
            "share of each schedule, top terms and documents, searchable and sortable (one "
            "file, opens offline in a browser).", ""]


def _conclusion_lines(summary: Mapping[str, Any]) -> list[str]:
    """The closing section: computed from the numbers above."""
    out = ["## Conclusion", "", f"- {summary['tail_starvation']['sentence']}"]
    choose = summary.get("choose_clip")
    if choose:
        best = choose["recommended_clip"]
        out.append(f"- {'Recommended' if best is not None else 'No recommended'} clip R for "
                   f"`clusterclip` at T = {choose['budget']:,}: {choose['reason']}")
    for line in (_experiment_line(summary), _search_line(summary)):
        if line:
            out.append(f"- {line}")
    return out + [""]


def render_markdown(summary: Mapping[str, Any], figures: Mapping[str, str]) -> str:
    """Markdown text of the report; ``figures`` maps figure keys to file names."""
    sched = summary["schedules"]
    lines = [*_head_lines(summary), *_cluster_lines(summary, figures),
             *_agreement_lines(summary), *_example_lines(summary),
             *_schedule_lines(summary, figures), *_clip_note_lines(sched)]
    choose = summary.get("choose_clip")
    if choose:
        lines += _choose_lines(choose, figures, sched)
    lines += _conclusion_lines(summary)
    if summary.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in summary["notes"]] + [""]
    return "\n".join(lines)


def _head_lines(summary: Mapping[str, Any]) -> list[str]:
    """The title, the corpus and budget, the experiment's and the search's lines."""
    p = summary["clusters"]
    return [
        "# ClusterClip report",
        "",
        f"Corpus: {summary['documents']:,} documents, {summary['eligible_documents']:,} "
        f"eligible for sampling ({summary['excluded_documents']:,} excluded, label -1), in "
        f"{p['clusters']:,} non-empty clusters ({p['empty_clusters']} empty). "
        f"Budget T = {summary['num_samples']:,} samples "
        f"({summary['num_samples'] / max(1, summary['eligible_documents']):.2f} epochs).",
        "",
        _experiment_line(summary),
        "",
        *([_search_line(summary), ""] if _search_line(summary) else []),
        *_page_lines(summary),
    ]


def _cluster_lines(summary: Mapping[str, Any], figures: Mapping[str, str]) -> list[str]:
    """``## Clusters``: the sizes, head and tail shares, and the sizes figure."""
    p = summary["clusters"]
    return [
        "## Clusters",
        "",
        f"Sizes range from {p['min_size']:,} to {p['max_size']:,} documents (median "
        f"{p['median_size']:g}, {p['imbalance']:.0f}x imbalance). The largest "
        f"{p['head_fraction']:.0%} of clusters ({p['head_clusters']}) hold "
        f"{_pct(p['head_share'])} of the documents; the smallest {p['tail_fraction']:.0%} "
        f"({p['tail_clusters']}) hold {_pct(p['tail_share'])}.",
        "",
        f"![cluster sizes]({figures['sizes']})",
        "",
    ]


def _agreement_lines(summary: Mapping[str, Any]) -> list[str]:
    """The clusters' agreement with the label field (none without one)."""
    agreement = summary.get("label_agreement")
    if not agreement:
        return []
    return [
        f"### Agreement with the `{agreement['field']}` field",
        "",
        f"Over {agreement['documents']:,} documents ({agreement['skipped_missing']:,} "
        f"without a value skipped) and {agreement['classes']} distinct values:",
        "",
        *_table(["NMI", "ARI", "purity"],
                [[f"{agreement['nmi']:.3f}", f"{agreement['ari']:.3f}",
                  f"{agreement['purity']:.3f}"]]),
        "",
    ]


def _example_lines(summary: Mapping[str, Any]) -> list[str]:
    """``### What the clusters are``: the link to every cluster, the terms' sample and
    the documents nearest the centroids of the clusters shown."""
    lines: list[str] = []
    examples = summary.get("examples")
    browse = summary.get("clusters_md")
    if examples or browse:
        lines += ["### What the clusters are", ""]
    if browse:
        lines += [f"**Every cluster, largest first: [{browse}]({browse})**, with its size, "
                  "corpus share, share of each schedule below, top terms (c-TF-IDF: frequent "
                  "in the cluster, rare in the others) and the documents nearest its "
                  "centroid. Here, the largest and the smallest clusters.", ""]
    sampled = sample_sentence(summary.get("terms_sample"))
    if sampled and (examples or browse):
        lines += [sampled, ""]
    if examples:
        lines += ["Documents nearest each centroid (highest cosine similarity), first 200 "
                  "characters:",
                  ""]
        for ex in examples:
            label = f", mostly `{ex['majority_label']}`" if ex.get("majority_label") else ""
            lines.append(f"**Cluster {ex['label']}** ({ex['group']}, {ex['size']:,} "
                         f"document{'s' if ex['size'] != 1 else ''}{label})")
            lines.append("")
            if ex.get("terms"):
                lines += ["Top terms: " + ", ".join(f"`{t}`" for t in ex["terms"]), ""]
            for d in ex["documents"]:
                lines.append(f"- doc {d['index']} (score {d['score']:.3f}): "
                             f"{escape_inline(d['text'])}")
            lines.append("")
    return lines


def _sample_lines(sched: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The sentence saying the repetition counts come from a sample (none when exact)."""
    names = [name for name, s in sched.items() if "repetition_sample" in s]
    if not names:
        return []
    n = sched[names[0]]["repetition_sample"]
    if len(names) < len(sched):  # the generated schedules count every document
        return [f"{', '.join(f'`{name}`' for name in names)}: counted on a systematic sample "
                f"of {n:,} eligible documents (the corpus is too large to count every document "
                f"of a given schedule in bounded memory); its documents seen and max "
                f"repetition above are the sample's. The other rows count every document "
                f"(from their draws per cluster).", ""]
    return [f"Counted on a systematic sample of {n:,} eligible documents (the corpus is too large "
            f"to count every document in bounded memory); documents seen and max repetition "
            f"above are the sample's.", ""]


def _schedule_lines(summary: Mapping[str, Any], figures: Mapping[str, str]) -> list[str]:
    """``## Schedules``: the table, groups, tokens, the share and repetition figures."""
    sched = summary["schedules"]
    bins = repetition_bins(max(len(s["repetition_histogram"]) for s in sched.values()) - 1)
    return [
        "## Schedules",
        "",
        f"Each schedule below has the same budget T = {summary['num_samples']:,} samples over "
        f"the {summary['eligible_documents']:,} eligible documents of the whole corpus: its "
        "repetition counts are at this budget (the experiment's are at its own, over its "
        "training split). " + " ".join(
            f"`{name}` {STRATEGY_TEXT[name]}." for name in sched if name in STRATEGY_TEXT),
        "",
        *_table(
            ["schedule", "max repetition", "documents seen", "smallest 25% share",
             "largest 25% share", "cluster share min..max", "never sampled"],
            [[name, s["max_repetition"], _pct(s["coverage"]), _pct(s["tail_quartile_share"]),
              _pct(s["head_quartile_share"]),
              f"{s['cluster_share_min']:.2g}..{s['cluster_share_max']:.2g}",
              s["clusters_never_sampled"]] for name, s in sched.items()]),
        "",
        *_group_lines(sched),
        f"For reference, the smallest 25% of clusters hold {_pct(summary['corpus_tail_share'])} "
        f"of the corpus and the largest 25% hold {_pct(summary['corpus_head_share'])}.",
        "",
        *_token_lines(summary),
        "### Share of each cluster",
        "",
        f"![schedule share vs corpus share]({figures['share']})",
        "",
        "### Repetition",
        "",
        *_sample_lines(sched),
        *_table(["schedule"] + [f"seen {lo}x" if lo == hi else f"seen {lo}-{hi}x"
                                for lo, hi in bins],
                [[name] + [f"{sum(s['repetition_histogram'][lo:hi + 1]):,}" for lo, hi in bins]
                 for name, s in sched.items()]),
        "",
        f"![repetition histogram]({figures['repetition']})",
        "",
        *_tenths_lines(summary, figures),
    ]


def _clip_note_lines(sched: Mapping[str, Any]) -> list[str]:
    """Where each schedule's clusters leave the pool, or were clipped."""
    lines: list[str] = []
    for name, s in sched.items():
        if "pool_clip" in s:
            lines.append(f"`{name}` ({s['source']}): its clusters leave the pool after "
                         f"R = {s['pool_clip']} passes (`--clip`).")
            lines.append("")
        if "clip_events" in s and s["clip_events"].get("clusters_clipped"):
            ce = s["clip_events"]
            lines.append(f"`{name}`: {ce['clusters_clipped']} clusters clipped; the first at "
                         f"position {ce['first']:,}, the last at {ce['last']:,}.")
            lines.append("")
    return lines


def _group_lines(sched: dict[str, Any]) -> list[str]:
    """Repetition per near-duplicate group (W/groups.npy of `clusterclip dedup`), if any."""
    rows = [[name, s["max_group_repetition"], s["max_repetition"], f"{s['groups_seen']:,}",
             f"{s['groups']:,}"] for name, s in sched.items() if "max_group_repetition" in s]
    if not rows:
        return []
    worst = max(rows, key=lambda r: r[1])
    return [
        "Counted per near-duplicate group (`clusterclip dedup`): a group's documents together.",
        "",
        *_table(["schedule", "max repetition per group", "max per document", "groups seen",
                 "groups"], rows),
        "",
        f"Conclusion: `{worst[0]}` repeats one group's content {worst[1]} times; "
        + ("clip by group (`sample --groups`, `run --dedup`) bounds it by R."
           if worst[1] > worst[2] else "no group is repeated more than its most repeated "
                                       "document."),
        "",
    ]
