"""Training and evaluation of one run (one strategy, one seed) in plain PyTorch."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from clusterclip.lm.config import ModelConfig, TrainConfig
from clusterclip.lm.model import ByteLM


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    warm = max(1, int(cfg.warmup_frac * total))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def evaluate_documents(model: ByteLM, docs: Sequence[np.ndarray], batch_size: int,
                       device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """Summed loss of each document, read from its start after one EOS.

    ``docs``: token arrays (each ends with EOS and has at most ``seq_len``
    tokens). Returns ``(loss_sum float64[D], n_tokens int64[D])``: the summed
    cross-entropy in nats over each document's tokens (its bytes and final
    EOS) and their count. Documents are batched by length to limit padding.
    """
    was_training = model.training
    model.eval()
    lengths = np.array([d.size for d in docs], dtype=np.int64)
    if np.any(lengths > model.cfg.seq_len):
        raise ValueError("a document is longer than the model's window")
    loss_sum = np.zeros(len(docs), dtype=np.float64)
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = int(lengths[idx].max())
        inputs = torch.full((idx.size, width), model.cfg.eos, dtype=torch.long)
        targets = torch.full((idx.size, width), -100, dtype=torch.long)  # -100: ignored
        for row, i in enumerate(idx.tolist()):
            d = torch.from_numpy(docs[i].astype(np.int64))
            inputs[row, 1:d.numel()] = d[:-1]
            targets[row, :d.numel()] = d
        logits = model(inputs.to(device)).float()
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                 targets.to(device).reshape(-1),
                                 ignore_index=-100, reduction="none").view(idx.size, width)
        loss_sum[idx] = losses.sum(dim=1).double().cpu().numpy()
    model.train(was_training)
    return loss_sum, lengths


def train_run(model_cfg: ModelConfig, train_cfg: TrainConfig, windows: Iterator[np.ndarray],
              steps: int, seed: int, device: torch.device,
              evaluate: Callable[[ByteLM], float | dict[str, float]],
              on_step: Callable[[int], None] | None = None,
              on_batch: Callable[[int, np.ndarray], None] | None = None
              ) -> tuple[ByteLM, dict[str, Any]]:
    """Train a fresh model on ``steps`` batches of packed windows.

    The model is initialised from ``torch.manual_seed(seed)`` alone, so every
    strategy starts from the same weights for the same seed. ``windows`` yields
    int64[seq_len + 1] arrays (see :func:`~clusterclip.lm.data.pack_sequences`);
    running out of them before ``steps`` batches is an error. ``evaluate(model)``
    returns the validation loss (a float) or named losses (a dict, e.g.
    ``val_loss`` and ``train_loss`` measured the same way on held-out and on
    training documents) and is called at ``eval_points`` evenly spaced steps
    (0 and ``steps`` included) to draw the curve.

    Returns ``(model, log)`` with ``log = {"curve": [{step, tokens, batch_loss,
    **evaluate(model)}], "tokens": int}``; ``batch_loss`` is the mean loss of
    the training batches since the previous point (None at step 0): a running
    average over a model that kept improving, so it sits above a loss measured
    at the point itself. ``on_batch(step, token_losses)``, when given, gets each
    step's (batch_size, seq_len) float64 per-target-token losses before the update
    (the loss is then their mean: the same value, summed in another order).
    """
    torch.manual_seed(seed)
    model = ByteLM(model_cfg).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": train_cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=train_cfg.lr, betas=(0.9, 0.95))
    tokens_per_step = train_cfg.batch_size * model_cfg.seq_len
    n_points = max(2, train_cfg.eval_points)
    eval_steps = sorted({round(i * steps / (n_points - 1)) for i in range(n_points)})
    def point(step: int, batch_loss: float | None) -> dict[str, Any]:
        got = evaluate(model)
        named = got if isinstance(got, dict) else {"val_loss": float(got)}
        return {"step": step, "tokens": step * tokens_per_step, **named,
                "batch_loss": batch_loss}

    curve = [point(0, None)]
    running, running_n = 0.0, 0
    model.train()
    for step in range(steps):
        batch = []
        for _ in range(train_cfg.batch_size):
            w = next(windows, None)
            if w is None:
                raise RuntimeError(f"the schedule ran out of documents at step {step}")
            batch.append(w)
        data = torch.from_numpy(np.stack(batch)).to(device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, train_cfg)
        logits = model(data[:, :-1])
        if on_batch is None:
            loss = F.cross_entropy(logits.reshape(-1, model_cfg.vocab_size).float(),
                                   data[:, 1:].reshape(-1))
        else:
            tok = F.cross_entropy(logits.reshape(-1, model_cfg.vocab_size).float(),
                                  data[:, 1:].reshape(-1), reduction="none")
            loss = tok.mean()
            on_batch(step, tok.detach().double().view(data.shape[0], -1).cpu().numpy())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        opt.step()
        running += loss.item()
        running_n += 1
        if on_step is not None:
            on_step(1)
        if step + 1 in eval_steps:
            curve.append(point(step + 1, running / running_n))
            running, running_n = 0.0, 0
    return model, {"curve": curve, "tokens": steps * tokens_per_step}
