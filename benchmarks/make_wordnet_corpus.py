"""Build benchmarks/data/wordnet_glosses.jsonl.gz: a labelled short-text corpus
whose labels are semantic rather than lexical.

Each document is one WordNet 3.0 synset's gloss (its definition and example
sentences); its label is the synset's lexicographer file (``noun.animal``,
``noun.artifact``, ``verb.motion``, ...: 41 noun and verb categories that group
meanings, not words, and whose names rarely occur in the glosses). A fixed-seed
sample of 15,000 noun and verb synsets is kept. Source: Debian's ``wordnet-base``
package (``apt-get install wordnet-base``), read from /usr/share/wordnet.
WordNet 3.0 licence (permissive; its notice travels with the data in
benchmarks/data/WORDNET-LICENSE).

    python benchmarks/make_wordnet_corpus.py [--wordnet /usr/share/wordnet]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

# Lexicographer file names by number (WordNet's lexnames file).
LEXNAMES = [
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal",
    "noun.artifact", "noun.attribute", "noun.body", "noun.cognition", "noun.communication",
    "noun.event", "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive",
    "noun.object", "noun.person", "noun.phenomenon", "noun.plant", "noun.possession",
    "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact",
    "verb.creation", "verb.emotion", "verb.motion", "verb.perception", "verb.possession",
    "verb.social", "verb.stative", "verb.weather", "adj.ppl",
]
OUT = Path(__file__).parent / "data" / "wordnet_glosses.jsonl.gz"


def read_synsets(path: Path) -> list[tuple[str, str, str]]:
    """(offset, lexname, gloss) of every synset in one data.* file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("  "):  # licence header
                continue
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            out.append((fields[0], LEXNAMES[int(fields[1])], gloss.strip()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    ap.add_argument("--docs", type=int, default=15_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [(f"{pos}{off}", lex, gloss) for pos in ("noun", "verb")
            for off, lex, gloss in read_synsets(args.wordnet / f"data.{pos}")]
    keep = np.sort(np.random.default_rng(args.seed).choice(len(rows), args.docs, replace=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(OUT, "wb", mtime=0) as raw:
        for i in keep:
            sid, lex, gloss = rows[i]
            line = json.dumps({"id": sid, "text": gloss, "label": lex}, ensure_ascii=False)
            raw.write((line + "\n").encode("utf-8"))
    labels = {rows[i][1] for i in keep}
    print(f"{OUT}: {args.docs} of {len(rows)} synsets, {len(labels)} labels, "
          f"{OUT.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
