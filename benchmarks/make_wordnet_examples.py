"""Build benchmarks/data/wordnet_examples.jsonl.gz: short sentences labelled by the
meaning of one word in them, a corpus whose labels are semantic rather than lexical.

Each document is one WordNet 3.0 example sentence (the quoted parts of a noun or verb
synset's gloss, e.g. "she rubbed down her child with a sponge"); its label is the
lexicographer category of the synset it illustrates (``verb.contact``, ``noun.artifact``,
...: 41 categories of meaning whose names do not occur in the sentences). Synsets of
``wordnet_glosses.jsonl.gz`` are left out, so no text of that corpus is in this one. A
fixed-seed sample of 15,000 sentences is kept. Source: Debian's ``wordnet-base`` package
(``apt-get install wordnet-base``), read from /usr/share/wordnet; WordNet 3.0 licence
(permissive; its notice is benchmarks/data/WORDNET-LICENSE).

Harder than the glosses: a sentence is a few words of use, not a definition, and it often
holds words of other categories ("the dog barked" illustrates ``verb.communication``).

    python benchmarks/make_wordnet_examples.py [--wordnet /usr/share/wordnet]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

import numpy as np
from make_wordnet_corpus import read_synsets

DATA = Path(__file__).parent / "data"
OUT = DATA / "wordnet_examples.jsonl.gz"
GLOSSES = DATA / "wordnet_glosses.jsonl.gz"
_QUOTED = re.compile(r'"([^"]+)"')


def read_examples(path: Path, pos: str) -> list[tuple[str, str, str]]:
    """(synset id, lexname, sentence) of every example sentence in one data.* file."""
    return [(f"{pos}{off}", lex, s) for off, lex, gloss in read_synsets(path)
            for s in (q.strip() for q in _QUOTED.findall(gloss))
            if len(s.split()) >= 3]  # a sentence, not a lone phrase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    ap.add_argument("--docs", type=int, default=15_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with gzip.open(GLOSSES, "rt", encoding="utf-8") as f:
        taken = {json.loads(line)["id"] for line in f}
    rows = [r for pos in ("noun", "verb")
            for r in read_examples(args.wordnet / f"data.{pos}", pos) if r[0] not in taken]
    keep = np.sort(np.random.default_rng(args.seed).choice(len(rows), args.docs, replace=False))
    with gzip.GzipFile(OUT, "wb", mtime=0) as raw:
        for j, i in enumerate(keep):
            sid, lex, text = rows[i]
            line = json.dumps({"id": f"{sid}-{j}", "text": text, "label": lex},
                              ensure_ascii=False)
            raw.write((line + "\n").encode("utf-8"))
    labels = {rows[i][1] for i in keep}
    print(f"{OUT}: {args.docs} of {len(rows)} sentences, {len(labels)} labels, "
          f"{OUT.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
