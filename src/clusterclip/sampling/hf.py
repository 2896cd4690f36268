"""Hugging Face integrations, in process (optional: the ``hf`` extra).

- [`schedule_dataset`][clusterclip.sampling.hf.schedule_dataset]: a map-style
  ``datasets.Dataset`` in schedule order, ``dataset.select(schedule)``: an indices
  mapping over the same Arrow table, the rows themselves are not copied. From a
  schedule array (``W/schedule.npy``) or from sampler options (as
  [`make_sampler`][clusterclip.sampling.make_sampler]).
- ``ClusterClipTrainer``: a ``transformers.Trainer`` that draws its training
  rows from a
  [`ClusterClipTorchSampler`][clusterclip.sampling.torch.ClusterClipTorchSampler]
  instead of its own ``RandomSampler`` (which would silently undo the order);
  with ``mixer=`` (an [`OnlineMixer`][clusterclip.sampling.online.OnlineMixer])
  and ``labels=``, each training row's loss goes to the mixer by cluster and each
  checkpoint holds the mixer. Imports ``transformers`` on first use only.

A ``DataLoader`` over a ``datasets.Dataset`` takes the torch sampler as is:
``DataLoader(dataset, batch_size=8, sampler=ClusterClipTorchSampler(...))``.
In every case row ``i`` of ``dataset`` must be document ``i`` of the corpus
the labels were computed on.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from clusterclip.errors import InputError
from clusterclip.sampling.factory import make_sampler
from clusterclip.sampling.spec import rank_share
from clusterclip.sampling.stream import BaseSampler


def _num_documents(sampler: BaseSampler) -> int:
    return sampler.num_eligible + sampler.num_excluded


def schedule_dataset(dataset: Any, schedule: Any = None, *, rank: int = 0, world_size: int = 1,
                     **sampler_options: Any) -> Any:
    """``dataset`` (row ``i`` = document ``i``) in schedule order, lazily.

    Parameters
    ----------
    dataset : datasets.Dataset
        A map-style dataset whose row ``i`` is document ``i`` of the corpus the
        labels were computed on.
    schedule : array_like or None
        A 1-D integer array of document indices: the global schedule, e.g.
        ``np.load("W/schedule.npy", mmap_mode="r")``. Or leave it out and give the
        sampler's options instead.
    rank : int
        This rank: it gets positions ``rank, rank + W, ...``, ``floor(T / W)`` of
        them, as the sampler and ``clusterclip export`` serve it.
    world_size : int
        Number of ranks W.
    **sampler_options : Any
        Without ``schedule``: ``labels``, ``num_samples`` and any other parameter
        of [`make_sampler`][clusterclip.sampling.make_sampler] (``strategy``,
        ``clip``, ``seed``, ``cluster_weights``, ``groups``, ...);
        ``len(labels)`` must equal ``len(dataset)``.

    Returns
    -------
    datasets.Dataset
        ``dataset.select(...)``: an indices mapping of 8 bytes per position over
        the same Arrow table (no row is copied). Read it in order
        (``DataLoader(..., shuffle=False)``, ``.iter(batch_size)``).

    Raises
    ------
    InputError
        If both or neither of ``schedule`` and the sampler options are given, the
        schedule is not a 1-D integer array or holds a document outside the
        dataset, or the labels do not have one document per row.

    Examples
    --------
    >>> import numpy as np
    >>> from datasets import Dataset
    >>> from clusterclip.sampling.hf import schedule_dataset
    >>> dataset = Dataset.from_dict({"text": ["a", "b", "c", "d"]})
    >>> list(schedule_dataset(dataset, np.array([3, 1, 3, 0]))["text"])
    ['d', 'b', 'd', 'a']
    >>> labels = np.array([0, 0, 1, 1])
    >>> len(schedule_dataset(dataset, labels=labels, num_samples=6, clip=2))
    6
    """
    n = len(dataset)
    if schedule is not None:
        if sampler_options:
            raise InputError("give a schedule or sampler options, not both (got "
                             + ", ".join(sorted(sampler_options)) + ")")
        idx = np.asarray(schedule)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise InputError(f"schedule must be a 1-D integer array, got {idx.dtype} "
                             f"of shape {idx.shape}")
        first, count = rank_share(len(idx), rank, world_size)
        idx = np.asarray(idx[first:first + count * world_size:world_size], dtype=np.int64)
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            p = first + int(bad[0]) * world_size
            raise InputError(f"schedule position {p} holds document {int(idx[bad[0]])}, "
                             f"outside the dataset of {n} rows")
    else:
        if "labels" not in sampler_options or "num_samples" not in sampler_options:
            raise InputError("give a schedule, or the sampler options labels and num_samples")
        sampler = make_sampler(rank=rank, world_size=world_size, **sampler_options)
        if _num_documents(sampler) != n:
            raise InputError(f"labels has {_num_documents(sampler)} documents but the dataset "
                             f"{n} rows: row i must be document i")
        blocks = list(sampler.blocks())
        idx = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
    return dataset.select(idx)


class _OnlineMixing:
    """``ClusterClipTrainer``'s online mixing (before ``transformers.Trainer`` in its
    bases): the row-number column, each row's loss to the mixer, the checkpoint's state."""

    clusterclip_mixer: Any

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if self.clusterclip_mixer is not None and ROW not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, ROW]

    def compute_loss(self, model: Any, inputs: dict[str, Any],
                     return_outputs: bool = False, **kwargs: Any) -> Any:
        clusters = inputs.pop(CLUSTER, None)
        if clusters is None or not model.training:
            return super().compute_loss(model, inputs, return_outputs, **kwargs)
        loss, outputs = super().compute_loss(model, inputs, True, **kwargs)
        per_row, rows = _row_losses(outputs["logits"], inputs["labels"])
        self.clusterclip_mixer.observe(clusters.cpu().numpy()[rows], per_row)
        return (loss, outputs) if return_outputs else loss

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if self.clusterclip_mixer is not None:
            ds = self.train_dataset
            if not hasattr(ds, "add_column"):
                raise InputError("online mixing needs a datasets.Dataset as "
                                 "train_dataset (its rows get their cluster ids)",
                                 params=("mixer",))
            if ROW not in ds.column_names:
                self.train_dataset = ds.add_column(ROW, list(range(len(ds))))
            if resume_from_checkpoint:
                _load_online(self, resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)


@functools.cache
def _trainer_class() -> type:
    import transformers

    from clusterclip.sampling.torch import ClusterClipTorchSampler

    class ClusterClipTrainer(_OnlineMixing, transformers.Trainer):
        """``transformers.Trainer`` whose training rows come from ``train_sampler``.

        ``train_sampler``: a :class:`ClusterClipTorchSampler` over the global
        schedule (``rank=0, world_size=1``): under data parallel the Trainer
        (accelerate) itself gives rank ``r`` batch ``r`` of every ``W``
        consecutive batches, so optimizer step ``s`` consumes, over all ranks,
        exactly global positions ``[s G, (s + 1) G)`` with ``G`` = per-device
        batch x gradient accumulation x ``W``: the same positions per step as
        a loop with a per-rank sampler. A rank's share is refused (it would be
        split a second time). ``train_dataset`` row ``i`` must be document
        ``i``. The sampler serves ``num_samples`` positions per Trainer epoch;
        size it to the run (``max_steps x G``; a second epoch replays it).
        ``trainer.train(resume_from_checkpoint=...)`` goes on with the next
        batch of the schedule (the Trainer skips the batches it trained).
        Works with the ``_get_train_sampler`` of transformers 4.x (no argument)
        and 5.x (the dataset).

        Online mixing: ``mixer`` (an :class:`~clusterclip.sampling.online.OnlineMixer`
        over ``train_sampler``) with ``labels`` (the cluster id of each row). The
        Trainer then hands each training batch's rows' clusters past the collator,
        computes each row's loss from the logits the model already returned (a
        causal LM: mean cross-entropy of its ``labels`` shifted by one, -100
        ignored) and calls ``mixer.observe`` (under data parallel, the mixer sums
        over the ranks with one ``all_reduce``). Each checkpoint holds the mixer's
        state and the sampler's ``set_weights`` calls (``clusterclip_online.json``),
        restored by ``train(resume_from_checkpoint=...)``.
        """

        def __init__(self, *args: Any, train_sampler: ClusterClipTorchSampler,
                     mixer: Any = None, labels: Any = None, **kwargs: Any) -> None:
            if not isinstance(train_sampler, ClusterClipTorchSampler):
                raise InputError("train_sampler must be a ClusterClipTorchSampler, got "
                                 f"{type(train_sampler).__name__}")
            s = train_sampler.sampler
            if s.world_size != 1:
                raise InputError(
                    f"train_sampler serves rank {s.rank} of {s.world_size}, but Trainer "
                    f"splits the batches among the ranks itself: pass the global sampler "
                    f"(rank=0, world_size=1)")
            online = _checked_online(mixer, labels, s)
            if online is not None:
                kwargs["data_collator"] = _ClusterCollator(kwargs.get("data_collator"),
                                                           online[1])
                kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), _save_callback(mixer)]
            super().__init__(*args, **kwargs)
            self.clusterclip_sampler = train_sampler
            self.clusterclip_mixer = mixer

        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> ClusterClipTorchSampler:
            dataset = args[0] if args else kwargs.get("train_dataset")
            if dataset is None:
                dataset = self.train_dataset
            n = _num_documents(self.clusterclip_sampler.sampler)
            if len(dataset) != n:
                raise InputError(f"train_dataset has {len(dataset)} rows but the sampler's "
                                 f"labels {n} documents: row i must be document i")
            return self.clusterclip_sampler

    ClusterClipTrainer.__module__ = __name__
    ClusterClipTrainer.__qualname__ = "ClusterClipTrainer"
    return ClusterClipTrainer


#: The column (row number) the Trainer adds to the training set for online mixing, and
#: the batch key the collator turns it into (cluster ids).
ROW, CLUSTER = "clusterclip_row", "clusterclip_cluster"
#: The file each checkpoint gets for online mixing.
ONLINE_STATE = "clusterclip_online.json"


def _checked_online(mixer: Any, labels: Any, sampler: BaseSampler
                    ) -> tuple[Any, np.ndarray] | None:
    if mixer is None and labels is None:
        return None
    from clusterclip.sampling.online import OnlineMixer

    if not isinstance(mixer, OnlineMixer) or labels is None:
        raise InputError("online mixing needs mixer (an OnlineMixer) and labels (the "
                         "cluster id of each row) together", params=("mixer", "labels"))
    if mixer.sampler is not sampler:
        raise InputError("mixer: it re-weighs another sampler than train_sampler",
                         params=("mixer",))
    lab = np.asarray(labels)
    if lab.shape != (_num_documents(sampler),):
        raise InputError(f"labels has shape {lab.shape} but the sampler "
                         f"{_num_documents(sampler)} documents", params=("labels",))
    return mixer, lab


class _ClusterCollator:
    """The user's collator (default: transformers') over rows without :data:`ROW`; adds
    the rows' cluster ids under :data:`CLUSTER` (training rows only)."""

    def __init__(self, collate: Any, labels: np.ndarray) -> None:
        if collate is None:
            from transformers import default_data_collator as collate
        self.collate, self.labels = collate, labels

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        import torch

        if not features or ROW not in features[0]:
            return self.collate(features)
        rows = [int(f[ROW]) for f in features]
        batch = self.collate([{k: v for k, v in f.items() if k != ROW} for f in features])
        batch[CLUSTER] = torch.as_tensor(self.labels[rows], dtype=torch.long)
        return batch


def _row_losses(logits: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean next-token cross-entropy (labels shifted by one, -100 ignored) and
    the rows with at least one target."""
    import torch.nn.functional as F

    lg, tg = logits[:, :-1].detach().float(), labels[:, 1:]
    tok = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tg.reshape(-1), ignore_index=-100,
                          reduction="none").view(tg.shape)
    n = (tg != -100).sum(1)
    rows = (n > 0).cpu().numpy()
    per = (tok.sum(1) / n.clamp(min=1)).double().cpu().numpy()
    return per[rows], rows


def _save_callback(mixer: Any) -> Any:
    import transformers

    class _SaveOnline(transformers.TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:  # every rank holds the same state
                import os

                from clusterclip.storage.atomic import write_json

                folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
                write_json(os.path.join(folder, ONLINE_STATE),
                           {"mixer": mixer.state_dict(),
                            "weights_calls": mixer.sampler.state_dict().get(
                                "weights_calls", [])})

    return _SaveOnline()


def _load_online(trainer: Any, checkpoint: Any) -> None:
    """The mixer's state and the sampler's calls of ``checkpoint`` (True: the last one)."""
    from pathlib import Path

    from clusterclip.storage.jsonfile import read_json

    if checkpoint is True:
        from transformers.trainer_utils import get_last_checkpoint

        checkpoint = get_last_checkpoint(trainer.args.output_dir)
    path = Path(checkpoint) / ONLINE_STATE
    try:  # the one bounded JSON reader: its refusals name the file themselves
        saved = read_json(path, "the online mixer's state")
    except OSError as e:
        raise InputError(f"{path}: cannot read the online mixer's state "
                         f"({e.strerror or e})") from None
    mixer = trainer.clusterclip_mixer
    sampler = mixer.sampler
    if sampler.position or mixer.calls:
        raise InputError("resume_from_checkpoint with online mixing needs a fresh sampler "
                         "and mixer (the Trainer replays the schedule to the checkpoint)",
                         params=("mixer",))
    for at, w in saved["weights_calls"]:
        sampler.set_weights(w, at=at)
    mixer.load_state_dict(saved["mixer"])


def __getattr__(name: str) -> Any:
    if name == "ClusterClipTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
