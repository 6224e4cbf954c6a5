"""A small LSTM language model on seeded synthetic text: the LHC paper's LSTM
stand-in at CPU size.

The text is a seeded first-order Markov chain over `vocab` tokens whose
transition rows are sparse (each token has `branching` likely successors), so
there is structure to learn: a perfect model reaches a cross-entropy near
log(branching), a unigram model stays near log(vocab). Metric: next-token
accuracy.
"""
from __future__ import annotations

import torch
from torch import nn


def synthetic_text(seed: int, vocab: int = 64, length: int = 40_000, branching: int = 3) -> torch.Tensor:
    """int64 token stream of `length` tokens."""
    if not 1 <= branching <= vocab:
        raise ValueError(f"branching must be in 1..vocab ({vocab}), got {branching}")
    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(vocab, generator=g)[:branching] for _ in range(vocab)])
    weights = torch.rand(vocab, branching, generator=g) + 0.2
    picks = torch.multinomial(weights, length, replacement=True, generator=g)   # (vocab, length)
    out = torch.empty(length, dtype=torch.int64)
    tok = 0
    for t in range(length):
        out[t] = tok
        tok = int(succ[tok, picks[tok, t]])
    return out


def windows(stream: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping (input, next-token target) windows of seq_len tokens."""
    n = (len(stream) - 1) // seq_len
    x = stream[: n * seq_len].reshape(n, seq_len)
    y = stream[1: n * seq_len + 1].reshape(n, seq_len)
    return x, y


class LSTMLM(nn.Module):
    """Embedding - LSTM (batch_first) - Linear to the vocabulary."""

    def __init__(self, vocab: int = 64, emb: int = 32, hidden: int = 64, layers: int = 1):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.head(h)          # (batch, seq, vocab) logits


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(-1) == y).float().mean())
