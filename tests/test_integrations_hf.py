"""In-process integrations: our order reaches the trainer's model, without an export.

Hugging Face ``datasets`` in schedule order (``schedule_dataset``: a lazy ``select``), the
torch sampler under ``DataLoader`` and torchdata's ``StatefulDataLoader`` (stopped mid-run
and resumed), and ``transformers.Trainer`` training a tiny randomly initialised GPT-2
(``ClusterClipTrainer``): every test checks WHICH documents were consumed, in which order,
against the sampler's schedule. The recipes of docs/integrations.md run here as written.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import textwrap

import numpy as np
import pytest
import torch
from _helpers import child_env, docs_recipe, torchrun

from clusterclip.errors import InputError
from clusterclip.sampling.sampler import ClusterClipSampler
from clusterclip.sampling.torch import ClusterClipTorchSampler

datasets = pytest.importorskip("datasets")
from clusterclip.sampling.hf import schedule_dataset  # noqa: E402

N_DOCS = 120
MAX_BYTES = 24  # byte-level tokens per document: a tiny, download-free tokenisation


@pytest.fixture(scope="module")
def docs(pydocs_path):
    """The first N_DOCS documents of the bundled corpus and random labels (one excluded)."""
    with gzip.open(pydocs_path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(N_DOCS), f, strict=False)]
    labels = np.random.default_rng(5).integers(0, 5, size=N_DOCS).astype(np.int32)
    labels[3] = -1
    return texts, labels


@pytest.fixture(scope="module")
def dataset(docs):
    texts, _ = docs
    return datasets.Dataset.from_dict({"doc": list(range(len(texts))), "text": texts})


@pytest.fixture
def workdir(docs, tmp_path, monkeypatch):
    """tmp_path as the current directory, holding W/labels.npy and W/schedule.npy."""
    _, labels = docs
    (tmp_path / "W").mkdir()
    np.save(tmp_path / "W" / "labels.npy", labels)
    np.save(tmp_path / "W" / "schedule.npy", _schedule(labels, 300, seed=9))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "W"


def _schedule(labels, t, **options):
    return np.concatenate(list(ClusterClipSampler(labels, t, **options).blocks()))


def _flat(batches):
    return [d for b in batches for d in b]


def test_every_python_block_of_the_integrations_page_is_a_recipe_that_a_test_runs():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    section = (root / "docs" / "integrations.md").read_text(encoding="utf-8")
    blocks = re.findall(r"(?:<!-- recipe: ([\w-]+) -->\n)?```python\n", section)
    assert blocks and "" not in blocks, "a Python block in integrations.md has no recipe marker"
    tests = "".join(p.read_text(encoding="utf-8") for p in (root / "tests").glob("test_*.py"))
    assert [b for b in blocks if f'"{b}"' not in tests] == []  # docs_recipe(name) runs it


# -- datasets: select ----------------------------------------------------------------------

@pytest.mark.parametrize(("rank", "world_size"), [(0, 1), (1, 3)])
def test_schedule_dataset_is_the_schedule_over_the_same_rows(pydocs_path, tmp_path, rank,
                                                             world_size):
    # an Arrow-file-backed dataset, as load_dataset gives; row i is document i
    ds = datasets.load_dataset("json", data_files=[str(pydocs_path)], split="train",
                               cache_dir=str(tmp_path / "cache"))
    labels = np.random.default_rng(2).integers(0, 9, size=len(ds)).astype(np.int32)
    schedule = _schedule(labels, 1001, seed=1)
    np.save(tmp_path / "s.npy", schedule)
    out = schedule_dataset(ds, np.load(tmp_path / "s.npy", mmap_mode="r"), rank=rank,
                           world_size=world_size)
    want = schedule[rank:1001 - 1001 % world_size:world_size]
    assert len(out) == 1001 // world_size
    assert list(out["text"]) == [ds[int(d)]["text"] for d in want]
    # lazily: the same Arrow table (all rows, the same buffers) under an indices mapping
    assert out.data.num_rows == len(ds)
    assert out.cache_files[0] == ds.cache_files[0]
    col = ds.data.table.column("text").chunks[0].buffers()[2].address
    assert out.data.table.column("text").chunks[0].buffers()[2].address == col
    # from the sampler's options instead of a file: the sampler's own share
    same = schedule_dataset(ds, labels=labels, num_samples=1001, seed=1, rank=rank,
                            world_size=world_size)
    assert list(same["id"]) == list(out["id"])
    assert list(same["id"]) == [ds[int(d)]["id"] for d in
                                ClusterClipSampler(labels, 1001, seed=1, rank=rank,
                                                   world_size=world_size)]


def test_schedule_dataset_refuses_what_does_not_fit(dataset, docs):
    _, labels = docs
    bad = _schedule(labels, 50)
    bad[7] = N_DOCS
    cases = {
        f"schedule position 7 holds document {N_DOCS}, outside the dataset of {N_DOCS} rows":
            dict(schedule=bad),
        f"labels has {N_DOCS - 1} documents but the dataset {N_DOCS} rows":
            dict(labels=labels[:-1], num_samples=10),
        "give a schedule or sampler options, not both": dict(schedule=bad, labels=labels),
        "give a schedule, or the sampler options labels and num_samples": dict(labels=labels),
        "schedule must be a 1-D integer array": dict(schedule=np.zeros(3)),
        "rank must be < world_size 2, got 2": dict(schedule=bad, rank=2, world_size=2),
    }
    for msg, kw in cases.items():
        with pytest.raises(InputError, match=re.escape(msg)):
            schedule_dataset(dataset, **kw)


def test_dataloader_over_a_datasets_dataset_serves_each_rank_its_share(dataset, docs):
    _, labels = docs
    full = list(ClusterClipSampler(labels, 201, strategy="paced", seed=4))
    for rank in (0, 1):
        s = ClusterClipTorchSampler(labels, 201, strategy="paced", seed=4, rank=rank,
                                    world_size=2)
        got = [b["doc"].tolist() for b in torch.utils.data.DataLoader(dataset, batch_size=8,
                                                                      sampler=s)]
        assert _flat(got) == full[rank:200:2]


# -- the docs' recipes: plain loop, StatefulDataLoader, select ----------------------------

class _Crash(Exception):
    pass


def _run(code, dataset, stop_at=None):
    """Exec a recipe; its train_step records each batch's documents and, as batch number
    ``stop_at`` arrives, raises (a crash mid-training). Returns the batches trained."""
    trained: list[list[int]] = []

    def train_step(batch):
        if len(trained) == stop_at:
            raise _Crash
        trained.append(batch["doc"].tolist())

    if stop_at is None:
        exec(code, {"dataset": dataset, "train_step": train_step})
    else:
        with pytest.raises(_Crash):
            exec(code, {"dataset": dataset, "train_step": train_step})
    return trained


@pytest.mark.parametrize("recipe", ["torch-loop", "stateful-dataloader"])
def test_docs_loop_recipes_resume_after_a_crash_with_exactly_the_rest(recipe, dataset, docs,
                                                                        workdir):
    _, labels = docs
    want = list(ClusterClipSampler(labels, 400, clip=4, seed=0))
    code = docs_recipe(recipe)
    head = _run(code, dataset, stop_at=13)
    rest = _run(code, dataset)
    assert len(head) == 13 and all(len(b) == 8 for b in head + rest)
    assert _flat(head) == want[:104]
    assert _flat(rest) == want[104:]
    if recipe == "torch-loop":  # a finished run stays finished
        assert _run(code, dataset) == []


def test_docs_select_recipe_reads_rank_0s_share_in_order(dataset, workdir):
    trained = _run(docs_recipe("hf-select"), dataset)
    assert _flat(trained) == np.load(workdir / "schedule.npy")[0:300:2].tolist()


# -- transformers.Trainer on a tiny GPT-2 -----------------------------------------------------

@pytest.fixture
def one_thread():
    """Tiny models train fastest on one thread; the rest of the session keeps its setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tokenized(dataset):
    return dataset.map(lambda r: {"input_ids": list(r["text"].encode()[:MAX_BYTES])})


def _collate(features):
    """Pads byte-level ids (0) to the batch's longest; labels ignore the padding."""
    length = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, f in enumerate(features):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[i, :len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=MAX_BYTES, n_embd=16,
                                      n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0))


def _record_inputs(model):
    """The ``input_ids`` of every forward pass: what the model really consumed."""
    seen: list[torch.Tensor] = []
    model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(kwargs["input_ids"].detach().cpu()),
        with_kwargs=True)
    return seen


def _batches_of(tokenized, docs, batch_size):
    return [_collate([tokenized[int(d)] for d in docs[i:i + batch_size]])["input_ids"]
            for i in range(0, len(docs), batch_size)]


def test_docs_trainer_recipe_trains_gpt2_on_the_schedule_in_order(dataset, docs, workdir,
                                                                     one_thread):
    pytest.importorskip("accelerate")
    from transformers import Trainer

    _, labels = docs
    tokenized = _tokenized(dataset)
    model = _tiny_gpt2()
    seen = _record_inputs(model)
    before = model.lm_head.weight.detach().clone()
    ns = {"model": model, "dataset": tokenized, "collator": _collate}
    exec(docs_recipe("hf-trainer"), ns)
    # 10 steps of 8: the first 80 positions of the schedule, batch by batch
    want = _batches_of(tokenized, list(ClusterClipSampler(labels, 80, clip=4, seed=0)), 8)
    assert ns["trainer"].state.global_step == 10 and len(seen) == 10
    assert all(torch.equal(a, b) for a, b in zip(seen, want, strict=True))
    assert not torch.equal(model.lm_head.weight.detach(), before)  # it did train

    # the plain Trainer over the same data draws another order (its RandomSampler)
    plain = _tiny_gpt2()
    seen_plain = _record_inputs(plain)
    Trainer(model=plain, args=ns["args"], train_dataset=tokenized,
            data_collator=_collate).train()
    assert len(seen_plain) == 10
    assert not all(torch.equal(a, b) for a, b in zip(seen_plain, want, strict=True))


def test_trainer_resumed_from_a_checkpoint_goes_on_with_the_next_batches(dataset, docs,
                                                                         tmp_path, one_thread):
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from clusterclip.sampling.hf import ClusterClipTrainer

    _, labels = docs
    tokenized = _tokenized(dataset)
    want = _batches_of(tokenized, list(ClusterClipSampler(labels, 24, strategy="uniform",
                                                          seed=6)), 4)

    def train(resume):
        model = _tiny_gpt2()
        seen = _record_inputs(model)
        args = TrainingArguments(str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4,
                                 save_strategy="steps", save_steps=2, report_to="none",
                                 disable_tqdm=True)
        sampler = ClusterClipTorchSampler(labels, 24, strategy="uniform", seed=6, world_size=1)
        ClusterClipTrainer(model=model, args=args, train_dataset=tokenized,
                           data_collator=_collate, train_sampler=sampler
                           ).train(resume_from_checkpoint=resume)
        return seen

    full = train(None)
    assert all(torch.equal(a, b) for a, b in zip(full, want, strict=True))
    rest = train(str(tmp_path / "out" / "checkpoint-4"))
    assert all(torch.equal(a, b) for a, b in zip(rest, want[4:], strict=True))


def test_trainer_refuses_a_rank_share_and_a_misaligned_dataset(dataset, docs, tmp_path):
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from clusterclip.sampling.hf import ClusterClipTrainer

    _, labels = docs
    share = ClusterClipTorchSampler(labels, 40, rank=1, world_size=2)
    with pytest.raises(InputError, match=r"serves rank 1 of 2, but Trainer splits the batches"):
        ClusterClipTrainer(model=_tiny_gpt2(), train_sampler=share)
    args = TrainingArguments(str(tmp_path / "out"), max_steps=1, report_to="none")
    trainer = ClusterClipTrainer(
        model=_tiny_gpt2(), args=args, train_dataset=_tokenized(dataset).select(range(50)),
        data_collator=_collate, train_sampler=ClusterClipTorchSampler(labels, 40, world_size=1))
    with pytest.raises(InputError, match=f"has 50 rows but the sampler's labels {N_DOCS} doc"):
        trainer.train()


_DDP_WORKER = textwrap.dedent("""
    import json, os, sys
    import numpy as np, torch, datasets
    from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments
    from clusterclip.sampling.hf import ClusterClipTrainer
    from clusterclip.sampling.torch import ClusterClipTorchSampler

    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = 60
    labels = np.arange(n) % 3
    ds = datasets.Dataset.from_dict({"input_ids": [[d, 1, 2] for d in range(n)]})  # doc = id 0
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=8, n_embd=8, n_layer=1,
                                       n_head=2, bos_token_id=0, eos_token_id=0))
    seen = []
    model.register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["input_ids"][:, 0].tolist()), with_kwargs=True)
    args = TrainingArguments(sys.argv[1], max_steps=3, per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, use_cpu=True, ddp_backend="gloo",
                             report_to="none", save_strategy="no", disable_tqdm=True)
    T = args.max_steps * args.train_batch_size * args.gradient_accumulation_steps * args.world_size
    sampler = ClusterClipTorchSampler(labels, T, seed=3, rank=0, world_size=1)

    def collate(rows):
        ids = torch.tensor([r["input_ids"] for r in rows])
        return {"input_ids": ids, "labels": ids}

    ClusterClipTrainer(model=model, args=args, train_dataset=ds, data_collator=collate,
                       train_sampler=sampler).train()
    with open(os.path.join(sys.argv[1], f"rank{args.process_index}.json"), "w") as f:
        json.dump({"T": T, "world_size": args.world_size, "batches": seen}, f)
    # Neither Trainer nor accelerate destroys the gloo group: without this, a rank that
    # exits while its peer still tears down can abort ("terminate called without an active
    # exception"), the flake the `run` stage had until it destroyed its group too.
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
""")


def _rank_logs(logs) -> str:
    """Every rank's own stdout/stderr as torchrun teed them under ``logs``."""
    parts = [f"--- {f.relative_to(logs)}:\n{f.read_text(errors='replace')[-4000:]}"
             for f in sorted(logs.rglob("*.log")) if f.is_file()] if logs.is_dir() else []
    return "\n".join(parts) or f"(no rank logs under {logs})"


@pytest.mark.slow
def test_trainer_under_two_gloo_ranks_consumes_the_schedule_step_by_step(tmp_path):
    pytest.importorskip("accelerate")
    script = tmp_path / "worker.py"
    script.write_text(_DDP_WORKER)
    logs = tmp_path / "logs"  # each rank's stdout and stderr, for the message on a failure
    try:
        res = torchrun("--log-dir", logs, "--tee", "3", script, tmp_path, env=child_env(),
                       timeout=240)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"torchrun still running after {e.timeout} s\n{_rank_logs(logs)}\n"
                    f"--- torchrun's stderr:\n{(err or '')[-3000:]}")
    assert res.returncode == 0, (f"torchrun exit {res.returncode}\n{_rank_logs(logs)}\n"
                                 f"--- torchrun's stderr:\n{res.stderr[-3000:]}")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    T, B, GA, W = ranks[0]["T"], 2, 2, 2
    assert T == 3 * B * GA * W and ranks[0]["world_size"] == W
    full = list(ClusterClipSampler(np.arange(60) % 3, T, seed=3))
    for r, got in enumerate(ranks):
        # rank r's k-th micro-batch is global batch k W + r
        assert got["batches"] == [full[(k * W + r) * B:(k * W + r + 1) * B] for k in range(6)]
    for step in range(3):  # over both ranks, each optimizer step takes the next G positions
        taken = _flat(got["batches"][step * GA + m] for got in ranks for m in range(GA))
        assert sorted(taken) == sorted(full[step * B * GA * W:(step + 1) * B * GA * W])


# -- online mixing through the Trainer --------------------------------------------------------

def test_trainer_with_an_online_mixer_follows_its_calls_and_resumes_to_the_same_schedule(
        dataset, docs, tmp_path, one_thread):
    """ClusterClipTrainer(mixer=..., labels=...) feeds the mixer each row's loss by cluster;
    the batches are the schedule with the mixer's set_weights calls, and a run resumed
    from a checkpoint trains the rest of that schedule and makes the same calls."""
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments

    from clusterclip import OnlineMixer
    from clusterclip.sampling.hf import ClusterClipTrainer

    _, labels = docs
    tokenized = _tokenized(dataset)
    T = 96

    def train(resume):
        model = _tiny_gpt2()
        seen = _record_inputs(model)
        args = TrainingArguments(str(tmp_path / "out"), max_steps=12,
                                 per_device_train_batch_size=8, save_strategy="steps",
                                 save_steps=5, report_to="none", disable_tqdm=True)
        sampler = ClusterClipTorchSampler(labels, T, strategy="paced", clip=4, seed=1,
                                          world_size=1)
        mixer = OnlineMixer(sampler, every=16, min_count=4)
        ClusterClipTrainer(model=model, args=args, train_dataset=tokenized,
                           data_collator=_collate, train_sampler=sampler, mixer=mixer,
                           labels=labels).train(resume_from_checkpoint=resume)
        return seen, sampler.sampler.state_dict(), mixer.state_dict()

    seen, state, mixer_state = train(None)
    calls = state["weights_calls"]
    assert mixer_state["calls"] == len(calls) >= 3
    assert sum(mixer_state["counts"]) == T  # every trained row observed, once
    ref = ClusterClipSampler(labels, T, strategy="paced", clip=4, seed=1)
    for at, w in calls:
        ref.set_weights(w, at=at)
    assert all(torch.equal(a, b) for a, b in
               zip(seen, _batches_of(tokenized, list(ref), 8), strict=True))
    rest, state2, mixer_state2 = train(str(tmp_path / "out" / "checkpoint-5"))
    assert all(torch.equal(a, b) for a, b in zip(rest, seen[5:], strict=True))
    assert len(rest) == 7
    assert state2["weights_calls"] == calls and mixer_state2 == mixer_state


_DDP_ONLINE_WORKER = _DDP_WORKER.replace(
    "from clusterclip.sampling.torch import ClusterClipTorchSampler",
    "from clusterclip.sampling.torch import ClusterClipTorchSampler\n"
    "from clusterclip import OnlineMixer").replace(
    "sampler = ClusterClipTorchSampler(labels, T, seed=3, rank=0, world_size=1)",
    "sampler = ClusterClipTorchSampler(labels, T, strategy='paced', clip=4, seed=3, rank=0, "
    "world_size=1)\nmixer = OnlineMixer(sampler, every=4, min_count=2)").replace(
    "train_sampler=sampler).train()",
    "train_sampler=sampler, mixer=mixer, labels=labels).train()").replace(
    '"batches": seen}',
    '"batches": seen, "calls": sampler.sampler.state_dict().get("weights_calls", []), '
    '"mixer": mixer.state_dict()}')


@pytest.mark.slow
def test_trainer_online_mixing_under_two_gloo_ranks_makes_the_same_calls_on_both(tmp_path):
    """Each rank observes its own micro-batches; the mixer's all_reduce gives both ranks
    the same state and the same set_weights calls, and the batches follow them."""
    pytest.importorskip("accelerate")
    assert "mixer=mixer" in _DDP_ONLINE_WORKER and "OnlineMixer(sampler" in _DDP_ONLINE_WORKER
    script = tmp_path / "worker.py"
    script.write_text(_DDP_ONLINE_WORKER)
    logs = tmp_path / "logs"
    res = torchrun("--log-dir", logs, "--tee", "3", script, tmp_path, env=child_env(),
                   timeout=240)
    assert res.returncode == 0, (f"torchrun exit {res.returncode}\n{_rank_logs(logs)}\n"
                                 f"--- torchrun's stderr:\n{res.stderr[-3000:]}")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    T, B, W = ranks[0]["T"], 2, 2
    assert ranks[0]["calls"] == ranks[1]["calls"] and len(ranks[0]["calls"]) >= 1
    assert ranks[0]["mixer"] == ranks[1]["mixer"]
    assert sum(ranks[0]["mixer"]["counts"]) == T  # both ranks' rows, summed
    ref = ClusterClipSampler(np.arange(60) % 3, T, strategy="paced", clip=4, seed=3)
    for at, w in ranks[0]["calls"]:
        ref.set_weights(w, at=at)
    full = list(ref)
    for r, got in enumerate(ranks):
        assert got["batches"] == [full[(k * W + r) * B:(k * W + r + 1) * B] for k in range(6)]
