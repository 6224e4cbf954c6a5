"""Gradient densities of LHC's four models (NCF, LSTM, VGG19, BERT-base), measured from
real training steps on this machine (data/lhc_density_2026-11-27.json; data/README.md
names the machine, the date and the command). hosts/lhc/profiles.py carries the numbers.

What is measured. Each model is a PyTorch network whose layers are the profile's layer
groups; every step, each of `max(WORKERS)` workers runs forward + backward on its own
mini-batch (distinct samples: seeded by step and worker) at the shared weights, then the
workers' mean gradient takes one optimizer step (real training: the weights move). Per
profile layer and step:
  * per-worker density: the share of the layer's gradient entries that are exactly
    nonzero in one worker's gradient (mean over the workers of the step);
  * union density at n workers (n in WORKERS): the share nonzero in at least one of the
    first n workers' gradients (the support LHC's first round ORs together);
  * for embedding layers, the share of rows touched by the batch and `row_fill`, the
    nonzero share inside touched rows (1.0: a touched row is a run of `dim` nonzeros, the
    profile's cluster).
The first `WARMUP` steps train without being recorded; then `STEPS` steps are recorded
(every step's values are kept; the summary gives mean, min and max over steps).

Sizes. Embedding tables have the real vocabularies (NCF 138,493 users / 26,744 items,
MovieLens-20M; LSTM 10,000, PTB; BERT 30,522 WordPiece) and each worker the profile's
batch (NCF 65,536 samples, LSTM 20 x 35 tokens, BERT 32 x 128 tokens, VGG19 32 images):
the rows a batch touches depend on these and on the id distribution, not on a row's
width. Widths and depths are small (2 shared CPU cores; `Config` lists them): a row's
density is the same at any width (row_fill says so), and a dense layer's exact-zero share
comes from its structure (ReLU units silent over the whole batch; a full softmax), which
the small networks keep. They do not measure the full-size networks' dense layers.

Data [A]. No MovieLens, PTB or Wikipedia text is available offline and the project
bundles none: ids (users, items, tokens) are drawn i.i.d. from a Zipf law over a seeded
random ranking of the vocabulary, P(rank r) ~ 1 / r^s, nominal s = ZIPF_S = 1.0 (Zipf's
law for word frequencies; item popularity and user activity in MovieLens are long-tailed
too). `touch_sweep` redraws the ids alone at s in ZIPF_SWEEP (0 = uniform, the most rows a
batch can touch) for the range: a touched row is a nonzero row (the training steps check
it). NCF trains on implicit feedback as the MLPerf reference: each positive (user, item)
with NCF_NEGATIVES uniform negative items for the same user [A: the reference's 4, not
re-read here]; the sweep also gives 0 negatives. VGG19: 224 x 224 images of 1000
classes, a class's mean colour + i.i.d. pixel noise (no image data offline). Such images
are statistically alike, so a ReLU unit silent on one tends to be silent on all 32, and
the exact zeros this gives the small VGG19 (15 % of the convolutions', 38 % of the
FC layers' gradient) are a property of this data as much as of VGG19: natural images
vary more, and the full-size VGG19's dense layers may be denser, up to 1.0 [A]. Labels
of the LSTM (next token) and BERT (masked token or a sentence label) come from the same
draws.

Sparsification before compression [A]. The paper's body is not in the stored material
(only its abstract and introduction); the public demo (lihy0529/lossless_homomorphic_
compression, benchmark.py) aggregates synthetic data at 95 % sparsity and sparsifies
nothing; the abstract calls the scheme lossless ("no compromise on training accuracy"),
which a lossy top-k before it would contradict. The nominal is therefore no sparsification
(exact nonzeros). For the dense model (VGG19), where LHC has nothing to compress without
one, the alternative is per-layer top-k by magnitude at TOPK_RATIOS (0.001: Deep Gradient
Compression's 99.9 %; 0.01: the lhc workload's default topk_ratio; 0.05: the demo's
per-worker density) [A]: per worker exactly k of n per layer, and the union of the workers'
top-k sets measured on the real gradients.

BERT is measured twice: `bert` fine-tuning (a sentence-classification head on [CLS]; the
word embedding's gradient has the touched rows only), the profile's nominal, and
`bert_mlm` pre-training (masked-LM head whose decoder is tied to the word embedding, as
BERT's is, so every vocabulary row gets a gradient). Which the paper trained is not in
the stored material [A].

Run it (one thread, a few minutes on this machine):
    .venv/bin/python -m testbed.reproduce.measurements.lhc_density --out \\
        testbed/reproduce/measurements/data/lhc_density_<date>.json
`--smoke` runs a tiny version (few steps, small batches) for the tests.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from testbed.reproduce.measurements import Measurement, read_measurement_file

DATA = Path(__file__).with_name("data") / "lhc_density_2026-11-27.json"
SCHEMA = "lhc_density/1"
WORKERS = (2, 4, 8)
WARMUP, STEPS = 2, 8
ZIPF_S = 1.0                       # [A] Zipf's law exponent (word frequencies); range: ZIPF_SWEEP
ZIPF_SWEEP = (0.0, 0.8, 1.0, 1.2)  # 0: uniform ids (most rows touched); 0.8-1.2 around Zipf's 1 [A]
NCF_NEGATIVES = 4                  # [A] MLPerf NCF reference: 4 negatives per positive (not re-read)
TOPK_RATIOS = (0.001, 0.01, 0.05)  # [A] see the module doc
SWEEP_DRAWS = 5

# Nothing here checks a hardware model (the package's MEASUREMENTS are validations);
# hosts/lhc/profiles.py carries the densities and tests/unit/test_lhc_density.py checks
# that it carries this file's.
MEASUREMENTS: list[Measurement] = []


class DensityDataError(ValueError):
    """The measurement file is missing, malformed, or lacks the model or layer asked for."""


@dataclass(frozen=True)
class Config:
    """One model's measured setting: the profile's batch and vocabularies, small widths."""
    model: str
    batch: int                 # samples (NCF), sequences (LSTM, BERT) or images (VGG19) per worker
    seq: int = 0               # tokens per sequence (LSTM, BERT)
    width: int = 8             # embedding / hidden width of the small network
    topk: bool = False         # also measure top-k at TOPK_RATIOS (the dense model)


CONFIGS = {
    "ncf": Config("ncf", batch=65_536, width=8),
    "lstm": Config("lstm", batch=20, seq=35, width=32),
    "vgg19": Config("vgg19", batch=32, seq=224, width=4, topk=True),   # seq: image side
    "bert": Config("bert", batch=32, seq=128, width=32),
    "bert_mlm": Config("bert_mlm", batch=32, seq=128, width=32),
}
VOCAB = {"ncf_users": 138_493, "ncf_items": 26_744, "lstm": 10_000, "bert": 30_522}
BERT_POSITIONS = 512


# ---- ids -------------------------------------------------------------------------------
def zipf_ids(g, vocab: int, count: int, s: float):
    """`count` ranks from 0..vocab-1, P(rank r) ~ 1/(r+1)^s (`draw` maps ranks to ids)."""
    import torch  # noqa: PLC0415
    probs = _zipf_probs(vocab, s)
    return torch.multinomial(probs, count, replacement=True, generator=g)


@lru_cache(maxsize=None)
def _zipf_probs(vocab: int, s: float):
    import torch  # noqa: PLC0415
    w = torch.arange(1, vocab + 1, dtype=torch.float64).pow(-s)
    return (w / w.sum()).float()


@lru_cache(maxsize=None)
def _ranking(vocab: int, seed: int):
    """id of the r-th most frequent entry: a seeded permutation (popular ids are not adjacent)."""
    import torch  # noqa: PLC0415
    return torch.randperm(vocab, generator=torch.Generator().manual_seed(seed * 7919 + vocab))


def draw(vocab: int, count: int, s: float, seed: int, stream: int):
    import torch  # noqa: PLC0415
    g = torch.Generator().manual_seed(seed * 1_000_003 + stream)
    return _ranking(vocab, seed)[zipf_ids(g, vocab, count, s)]


# ---- the small networks ------------------------------------------------------------------
def _build(cfg: Config, seed: int):
    """(model, layer groups {profile layer: [parameters]}, embedding layers {name: (param, rows)},
    batch(step, worker) -> loss closure input, loss(model, batch), optimizer)."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    torch.manual_seed(seed)
    s = ZIPF_S
    if cfg.model == "ncf":
        from hosts.dnn.ncf import NCF  # noqa: PLC0415
        U, I, w = VOCAB["ncf_users"], VOCAB["ncf_items"], cfg.width
        m = NCF(U, I, dim=w, mlp=(4 * w, 2 * w, w))
        groups = {"user_gmf": [m.gmf_u.weight], "item_gmf": [m.gmf_i.weight], "user_mlp": [m.mlp_u.weight],
                  "item_mlp": [m.mlp_i.weight], "mlp": [*m.mlp.parameters(), *m.out.parameters()]}
        emb = {"user_gmf": m.gmf_u.weight, "item_gmf": m.gmf_i.weight, "user_mlp": m.mlp_u.weight,
               "item_mlp": m.mlp_i.weight}

        def batch(step, wk):
            pos = cfg.batch // (1 + NCF_NEGATIVES)
            users = draw(U, pos, s, seed, 10 * (step * 64 + wk) + 1)
            items = draw(I, pos, s, seed, 10 * (step * 64 + wk) + 2)
            g = torch.Generator().manual_seed(seed * 31 + step * 64 + wk)
            neg_i = torch.randint(0, I, (cfg.batch - pos,), generator=g)
            neg_u = users[torch.arange(cfg.batch - pos) // NCF_NEGATIVES % pos]   # each positive's user
            labels = torch.cat([torch.ones(pos), torch.zeros(cfg.batch - pos)])
            return torch.cat([users, neg_u]), torch.cat([items, neg_i]), labels

        def loss(b):
            return nn.functional.binary_cross_entropy_with_logits(m(b[0], b[1]), b[2])
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)           # [A] Adam, as MLPerf NCF
    elif cfg.model == "lstm":
        from hosts.dnn.lstm import LSTMLM  # noqa: PLC0415
        V = VOCAB["lstm"]
        m = LSTMLM(vocab=V, emb=cfg.width, hidden=cfg.width, layers=2)   # Zaremba et al.: 2 layers
        groups = {"embedding": [m.embed.weight], "lstm": list(m.lstm.parameters()),
                  "softmax": list(m.head.parameters())}
        emb = {"embedding": m.embed.weight, "softmax": m.head.weight}

        def batch(step, wk):
            toks = draw(V, cfg.batch * (cfg.seq + 1), s, seed, step * 64 + wk).reshape(cfg.batch, cfg.seq + 1)
            return toks[:, :-1], toks[:, 1:]

        def loss(b):
            return nn.functional.cross_entropy(m(b[0]).reshape(-1, V), b[1].reshape(-1))
        opt = torch.optim.SGD(m.parameters(), lr=1.0)             # [A] Zaremba et al.: SGD, lr 1
    elif cfg.model == "vgg19":
        m = _nets()[0](cfg.width)
        groups = {"conv": list(m.features.parameters()), "fc": list(m.classifier.parameters())}
        emb = {}
        side = cfg.seq

        def batch(step, wk):      # class-dependent mean colour + pixel noise: 1000 classes, no image data
            g = torch.Generator().manual_seed(seed * 131 + step * 64 + wk)
            y = torch.randint(0, 1000, (cfg.batch,), generator=g)
            centre = torch.randn(1000, 3, 1, 1, generator=torch.Generator().manual_seed(seed))[y]
            return centre + torch.randn(cfg.batch, 3, side, side, generator=g), y

        def loss(b):
            return nn.functional.cross_entropy(m(b[0]), b[1])
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)   # [A] the VGG paper's SGD
    else:
        V, mlm = VOCAB["bert"], cfg.model == "bert_mlm"
        m = _nets()[1](V, cfg.width, mlm)
        groups = {"word_embedding": [m.word.weight], "position_type": [m.pos.weight, m.typ.weight],
                  "encoder_and_rest": [p for n, p in m.named_parameters()
                                       if not n.startswith(("word.", "pos.", "typ."))]}
        emb = {"word_embedding": m.word.weight, "position_type": m.pos.weight}

        def batch(step, wk):
            toks = draw(V, cfg.batch * cfg.seq, s, seed, step * 64 + wk).reshape(cfg.batch, cfg.seq)
            g = torch.Generator().manual_seed(seed * 17 + step * 64 + wk)
            if mlm:       # BERT: 15 % of the tokens are predicted
                chosen = torch.rand(cfg.batch, cfg.seq, generator=g) < 0.15
                chosen[0, 0] |= not chosen.any()       # at least one (a smoke batch can draw none)
                return toks, chosen
            return toks, torch.randint(0, 2, (cfg.batch,), generator=g)

        def loss(b):
            if mlm:
                return nn.functional.cross_entropy(m(b[0], b[1]), b[0][b[1]])
            return nn.functional.cross_entropy(m(b[0]), b[1])
        opt = torch.optim.Adam(m.parameters(), lr=1e-4)           # [A] Devlin et al.: Adam, 1e-4
    return m, groups, emb, batch, loss, opt


def _vgg_layers(width: int):
    """VGG19's configuration E (16 convolutions, 5 max-pools) at width/64 of its channels."""
    from torch import nn  # noqa: PLC0415
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
           512, 512, 512, 512, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            out = max(1, v * width // 64)
            layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU()]
            c = out
    return nn.Sequential(*layers), c


@lru_cache(maxsize=None)
def _nets():
    """The small VGG19 and BERT classes, defined on first use (torch is imported lazily:
    the measurements package imports every module)."""
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    class SmallVgg19(nn.Module):
        """torchvision's vgg19 (configuration E: 16 conv + 3 FC, ReLU, max-pools, a 7 x 7 adaptive
        average pool, dropout 0.5, 1000 classes) at width/64 of its channels and FC widths, on
        224 x 224 ImageNet-sized images (the model the profile's 143.7M parameters count: at
        CIFAR's 32 x 32 the last convolutions see 2 x 2 maps and a third of their gradient is
        exactly zero, a property of that input size, not of VGG19 on ImageNet)."""

        def __init__(self, width: int = 4, classes: int = 1000):
            super().__init__()
            self.features, c = _vgg_layers(width)
            self.pool = nn.AdaptiveAvgPool2d((7, 7))
            fc = 4096 * width // 64
            self.classifier = nn.Sequential(nn.Linear(c * 49, fc), nn.ReLU(), nn.Dropout(0.5), nn.Linear(fc, fc),
                                            nn.ReLU(), nn.Dropout(0.5), nn.Linear(fc, classes))
            # torchvision's VGG initialisation (torchvision/models/vgg.py _initialize_weights): without it
            # PyTorch's default init lets the signal fade over 16 plain ReLU convolutions until the biases
            # decide the sign and whole channels are silent (a third of the conv gradient zero at width 8)
            for mod in self.modules():
                if isinstance(mod, nn.Conv2d):
                    nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
                    nn.init.zeros_(mod.bias)
                elif isinstance(mod, nn.Linear):
                    nn.init.normal_(mod.weight, 0, 0.01)
                    nn.init.zeros_(mod.bias)

        def forward(self, x):
            return self.classifier(self.pool(self.features(x)).flatten(1))

    class SmallBert(nn.Module):
        """BERT's structure at small width: word + position + token-type embeddings, LayerNorm,
        2 post-norm GELU encoder layers; fine-tuning head (tanh pooler on [CLS], then a 2-way
        classifier) or the masked-LM head (dense + GELU + LayerNorm, decoder tied to the word
        embedding, its own bias), as BertForMaskedLM."""

        def __init__(self, vocab: int, width: int, mlm: bool, layers: int = 2, heads: int = 2):
            super().__init__()
            self.mlm = mlm
            self.word, self.pos = nn.Embedding(vocab, width), nn.Embedding(BERT_POSITIONS, width)
            self.typ = nn.Embedding(2, width)
            self.norm = nn.LayerNorm(width)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, activation="gelu",
                                           batch_first=True),
                layers, enable_nested_tensor=False)
            if mlm:
                self.transform = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width))
                self.decoder_bias = nn.Parameter(torch.zeros(vocab))
            else:
                self.pooler, self.classifier = nn.Linear(width, width), nn.Linear(width, 2)

        def forward(self, toks, chosen=None):
            """Logits: the sentence label's, or (MLM) the vocabulary's at the `chosen` positions
            only (the loss is on those; the others' logits would get no gradient)."""
            pos = torch.arange(toks.shape[1]).unsqueeze(0)
            h = self.encoder(self.norm(self.word(toks) + self.pos(pos) + self.typ(torch.zeros_like(toks))))
            if self.mlm:
                return self.transform(h[chosen]) @ self.word.weight.T + self.decoder_bias
            return self.classifier(torch.tanh(self.pooler(h[:, 0])))

    return SmallVgg19, SmallBert


# ---- one model's training run ------------------------------------------------------------
def measure_model(cfg: Config, steps: int = STEPS, warmup: int = WARMUP, workers: tuple[int, ...] = WORKERS,
                  seed: int = 0, log: Callable[[str], None] = print) -> dict[str, Any]:
    import torch  # noqa: PLC0415
    torch.set_num_threads(1)
    m, groups, emb, batch, loss, opt = _build(cfg, seed)
    m.train()
    params = {name: sum(p.numel() for p in ps) for name, ps in groups.items()}
    W = max(workers)
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for step in range(warmup + steps):
        record = step >= warmup
        union = {name: torch.zeros(n, dtype=torch.bool) for name, n in params.items()}
        topk_union = {(name, r): torch.zeros(n, dtype=torch.bool) for name, n in params.items()
                      for r in TOPK_RATIOS} if cfg.topk and record else {}
        total = [torch.zeros_like(p) for p in m.parameters()]
        per_worker: dict[str, list[float]] = {name: [] for name in params}
        touched: dict[str, list[float]] = {name: [] for name in emb}
        fill: dict[str, list[float]] = {name: [] for name in emb}
        unions: dict[str, dict[str, float]] = {name: {} for name in params}
        topk_unions: dict[str, dict[str, dict[str, float]]] = {}
        for wk in range(W):
            m.zero_grad(set_to_none=False)
            loss(batch(step, wk)).backward()
            for t, p in zip(total, m.parameters()):
                t += p.grad
            if not record:
                continue
            for name, ps in groups.items():
                g = torch.cat([p.grad.reshape(-1) for p in ps])
                nz = g != 0
                per_worker[name].append(float(nz.sum()) / params[name])
                union[name] |= nz
                for r in TOPK_RATIOS if cfg.topk else ():
                    k = max(1, int(round(r * params[name])))
                    mask = torch.zeros(params[name], dtype=torch.bool)
                    mask[g.abs().topk(k).indices] = True
                    topk_union[name, r] |= mask
            for name, w in emb.items():
                row_nz = (w.grad != 0).any(dim=1)
                touched[name].append(float(row_nz.float().mean()))
                fill[name].append(float((w.grad[row_nz] != 0).float().mean()) if row_nz.any() else 0.0)
            if wk + 1 in workers:
                for name in params:
                    unions[name][str(wk + 1)] = float(union[name].sum()) / params[name]
                    for r in TOPK_RATIOS if cfg.topk else ():
                        topk_unions.setdefault(name, {}).setdefault(str(r), {})[str(wk + 1)] = \
                            float(topk_union[name, r].sum()) / params[name]
        for p, t in zip(m.parameters(), total):
            p.grad = t / W
        opt.step()
        if record:
            row = {"step": step, "layers": {}}
            for name in params:
                d = {"per_worker": statistics.fmean(per_worker[name]),
                     "per_worker_min": min(per_worker[name]), "per_worker_max": max(per_worker[name]),
                     "union": unions[name]}
                if name in emb:
                    d["rows_touched"] = statistics.fmean(touched[name])
                    d["row_fill"] = min(fill[name])
                if name in topk_unions:
                    d["topk_union"] = topk_unions[name]
                row["layers"][name] = d
            rows.append(row)
            log(f"{cfg.model:9s} step {step}: " + ", ".join(
                f"{n} {d['per_worker']:.4g}/{d['union'][str(W)]:.4g}" for n, d in row["layers"].items())
                + f" ({time.time() - t0:.1f} s)")
    return {"config": {"batch": cfg.batch, "seq": cfg.seq, "width": cfg.width, "zipf_s": ZIPF_S,
                       "negatives": NCF_NEGATIVES if cfg.model == "ncf" else None,
                       "warmup": warmup, "steps": steps, "workers": list(workers), "seed": seed},
            "small_params": params, "steps": rows, "summary": _summary(rows, workers, cfg.topk),
            "wall_s": time.time() - t0}


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def _summary(rows: list[dict[str, Any]], workers: tuple[int, ...], topk: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in rows[0]["layers"]:
        ls = [r["layers"][name] for r in rows]
        d: dict[str, Any] = {"per_worker": _stats([x["per_worker"] for x in ls]),
                             "union": {str(n): _stats([x["union"][str(n)] for x in ls]) for n in workers}}
        if "rows_touched" in ls[0]:
            d["rows_touched"] = _stats([x["rows_touched"] for x in ls])
            d["row_fill_min"] = min(x["row_fill"] for x in ls)
        if topk and "topk_union" in ls[0]:
            d["topk"] = {str(r): {"per_worker": r, "union": {str(n): _stats([x["topk_union"][str(r)][str(n)]
                                                                             for x in ls]) for n in workers}}
                         for r in TOPK_RATIOS}
        out[name] = d
    return out


# ---- the id-distribution range --------------------------------------------------------------
def touch_sweep(draws: int = SWEEP_DRAWS, workers: tuple[int, ...] = WORKERS, scale: float = 1.0,
                seed: int = 1) -> dict[str, Any]:
    """Rows touched per worker and in the union of n workers' batches, ids alone, at each
    Zipf exponent of ZIPF_SWEEP (a touched row is a nonzero gradient row: measure_model
    checks row_fill). scale < 1 shrinks the batches (smoke runs)."""
    import torch  # noqa: PLC0415
    cases = {   # table: (vocab, ids per worker's batch, uniform extra ids: NCF's negatives)
        "ncf_users": (VOCAB["ncf_users"], int(65_536 * scale) // (1 + NCF_NEGATIVES), 0),
        "ncf_items": (VOCAB["ncf_items"], int(65_536 * scale) // (1 + NCF_NEGATIVES),
                      int(65_536 * scale) - int(65_536 * scale) // (1 + NCF_NEGATIVES)),
        "ncf_items_no_negatives": (VOCAB["ncf_items"], int(65_536 * scale), 0),
        "lstm": (VOCAB["lstm"], int(20 * 35 * scale), 0),
        "bert": (VOCAB["bert"], int(32 * 128 * scale), 0),
    }
    W, out = max(workers), {}
    for table, (vocab, count, uniform) in cases.items():
        out[table] = {"vocab": vocab, "zipf_ids": count, "uniform_ids": uniform, "by_s": {}}
        for s in ZIPF_SWEEP:
            per, uni = [], {str(n): [] for n in workers}
            for d in range(draws):
                union = torch.zeros(vocab, dtype=torch.bool)
                for wk in range(W):
                    ids = draw(vocab, count, s, seed, d * 64 + wk)
                    if uniform:
                        g = torch.Generator().manual_seed(seed * 97 + d * 64 + wk)
                        ids = torch.cat([ids, torch.randint(0, vocab, (uniform,), generator=g)])
                    mask = torch.zeros(vocab, dtype=torch.bool)
                    mask[ids] = True
                    per.append(float(mask.float().mean()))
                    union |= mask
                    if wk + 1 in workers:
                        uni[str(wk + 1)].append(float(union.float().mean()))
            out[table]["by_s"][str(s)] = {"per_worker": _stats(per), "union": {n: _stats(v) for n, v in uni.items()}}
    return out


def measure(smoke: bool = False, models: tuple[str, ...] = tuple(CONFIGS),
            log: Callable[[str], None] = print) -> dict[str, Any]:
    out: dict[str, Any] = {"models": {}}
    for name in models:
        cfg = CONFIGS[name]
        if smoke:      # tiny batches, 1 recorded step: checks the machinery, not the numbers
            cfg = replace(cfg, batch=max(2, cfg.batch // 256) if name == "ncf" else 2,
                          seq=32 if name == "vgg19" else min(cfg.seq, 8))
        out["models"][name] = measure_model(cfg, steps=1 if smoke else STEPS, warmup=1 if smoke else WARMUP,
                                            log=log)
    out["touch_sweep"] = touch_sweep(draws=1 if smoke else SWEEP_DRAWS, scale=1 / 256 if smoke else 1.0)
    return out


# ---- the file --------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def load(path: Path = DATA) -> dict[str, Any]:
    path = Path(path)
    data = read_measurement_file(path, DensityDataError)
    if data.get("schema") != SCHEMA or set(data.get("models", {})) != set(CONFIGS) or data.get("smoke"):
        raise DensityDataError(f"{path}: not a full {SCHEMA} run (models {', '.join(CONFIGS)})")
    return data


def layer_summary(model: str, layer: str, path: Path = DATA) -> dict[str, Any]:
    """The summary of one profile layer's measurement (per_worker, union by worker count)."""
    data = load(path)
    if model not in data["models"]:
        raise DensityDataError(f"{path}: no model {model!r} (have {sorted(data['models'])})")
    layers = data["models"][model]["summary"]
    if layer not in layers:
        raise DensityDataError(f"{path}: {model} has no layer {layer!r} (have {sorted(layers)})")
    return layers[layer]


def source(path: Path = DATA) -> str:
    data = load(path)
    return f"{Path(path).name} ({data['date']}, {data['machine']}; `{data['command']}`)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.reproduce.measurements.lhc_density",
                                description="measure LHC's models' per-worker and union gradient densities "
                                            "(module doc)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--smoke", action="store_true", help="tiny batches and one step: checks the machinery only")
    p.add_argument("--models", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    a = p.parse_args(argv)
    models = tuple(x for x in a.models.split(",") if x)
    unknown = [x for x in models if x not in CONFIGS]
    if unknown or not models:
        p.error(f"unknown model(s) {unknown or models}; known: {', '.join(CONFIGS)}")
    import os  # noqa: PLC0415

    import torch  # noqa: PLC0415
    torch.set_num_threads(1)
    t0 = time.time()
    got = measure(a.smoke, models)
    out = {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d"), "smoke": a.smoke,
           "command": "python -m testbed.reproduce.measurements.lhc_density " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, {len(os.sched_getaffinity(0))} "
                      f"cores, Python {platform.python_version()}, torch {torch.__version__}, 1 thread",
           "method": "per step: each of max(workers) workers' forward+backward on its own mini-batch at the shared "
                     "weights; exact-nonzero share per profile layer, per worker and OR-ed over the first n workers; "
                     "then one optimizer step on the workers' mean gradient; ids Zipf(s) over a seeded ranking",
           "wall_s": None, **got}
    out["wall_s"] = time.time() - t0
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    for name, m in out["models"].items():
        for layer, d in m["summary"].items():
            print(f"{name:9s} {layer:17s} per-worker {d['per_worker']['mean']:.4g}  union " + "  ".join(
                f"{n}: {u['mean']:.4g}" for n, u in d["union"].items()))
    print(f"wall {out['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
