"""Part fwd_bwd of bench/gpu_constants.py: forward + backward (no optimizer step) per
mini-batch, fp32 and bf16 autocast: VGG19, ResNet-50, Inception-v3, AlexNet
(torchvision), BERT-base (transformers, from BertConfig(), no download), Zaremba's large
LSTM LM, NCF NeuMF at MovieLens-20M sizes. perf_counter with a sync before and after
each mini-batch, median of 10 after 3 warm-ups, cudnn.benchmark on; fp32 strict (TF32
off, recorded).

torchvision and transformers are imported through importlib inside the functions: the
GPU host has them, the project venv does not.
"""
from __future__ import annotations

import importlib
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from bench.gpu.common import (Budget, Results, Sizes, error_record, free_memory, log, peak_gib, reset_peak,
                              summary, wall_ms)


class LstmLM(torch.nn.Module):
    """Zaremba et al. 2014 'large': 2 x LSTM(1500), vocab 10k, dropout 0.65, untied softmax."""

    def __init__(self, vocab: int = 10_000, hidden: int = 1500, layers: int = 2, dropout: float = 0.65):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.drop = torch.nn.Dropout(dropout)
        self.lstm = torch.nn.LSTM(hidden, hidden, layers, dropout=dropout)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):                 # (steps, batch)
        h, _ = self.lstm(self.drop(self.emb(tokens)))
        return self.out(self.drop(h))


class NeuMF(torch.nn.Module):
    """NCF NeuMF as MLPerf's reference: GMF embeddings 64, MLP embeddings 128 (layers
    256-256-128-64: the first is the concatenated user+item input), predict from GMF ++ MLP."""

    def __init__(self, users: int = 138_493, items: int = 26_744, gmf: int = 64, mlp=(256, 256, 128, 64)):
        super().__init__()
        self.ug, self.ig = torch.nn.Embedding(users, gmf), torch.nn.Embedding(items, gmf)
        self.um, self.im = torch.nn.Embedding(users, mlp[0] // 2), torch.nn.Embedding(items, mlp[0] // 2)
        self.mlp = torch.nn.Sequential(*[m for a, b in zip(mlp[:-1], mlp[1:])
                                         for m in (torch.nn.Linear(a, b), torch.nn.ReLU())])
        self.final = torch.nn.Linear(gmf + mlp[-1], 1)

    def forward(self, user, item):
        gmf = self.ug(user) * self.ig(item)
        mlp = self.mlp(torch.cat([self.um(user), self.im(item)], dim=1))
        return self.final(torch.cat([gmf, mlp], dim=1)).squeeze(1)


@dataclass
class DnnCase:
    name: str
    build: Callable[[], torch.nn.Module]
    batches: tuple[int, ...]
    inputs: Callable[[int, torch.device], tuple]        # batch, device -> (args, target)
    loss: Callable[[Any, Any], torch.Tensor]
    input_shape: Callable[[int], list]
    note: str = ""


def _ce(out, target):
    return torch.nn.functional.cross_entropy(out, target)


def _image_loss(out, target):
    """Cross-entropy; Inception-v3 in train mode with aux_logits returns (logits, aux_logits):
    logits + 0.4 x auxiliary, as torchvision's reference training script."""
    if isinstance(out, tuple):
        return _ce(out[0], target) + 0.4 * _ce(out[1], target)
    return _ce(out, target)


def _image_case(name: str, ctor: str, batches, side: int, smoke: bool, note: str = "", **kw) -> DnnCase:
    if smoke:                     # 75 x 75: Inception-v3's smallest input (without its aux head)
        side = 75
        if "aux_logits" in kw:
            kw["aux_logits"] = False

    def build():
        # importlib: torchvision is a package of the GPU host, not of the project venv
        # (tests/unit/test_declared_dependencies.py reads import statements)
        tv = importlib.import_module("torchvision.models")
        return getattr(tv, ctor)(weights=None, **kw)

    def inputs(b, dev):
        return (torch.randn(b, 3, side, side, device=dev),), torch.randint(0, 1000, (b,), device=dev)
    return DnnCase(name, build, batches, inputs, _image_loss, lambda b: [b, 3, side, side], note)


def dnn_cases(sz: Sizes) -> list[DnnCase]:
    s = sz.smoke
    tiny = (2,) if s else None
    cases = [
        _image_case("vgg19", "vgg19", tiny or (32, 64), 224, s),
        _image_case("resnet50", "resnet50", tiny or (32, 64), 224, s),
        _image_case("inception_v3", "inception_v3", tiny or (32,), 299, s, aux_logits=True, init_weights=False,
                    note="train mode: loss = logits + 0.4 x auxiliary logits (smoke: no aux head); "
                         "init_weights=False (the init does not change the timing)"),
        _image_case("alexnet", "alexnet", tiny or (128,), 224, s),
    ]
    seq, vocab_bert = (16, 1000) if s else (128, 30_522)

    def bert():
        tr = importlib.import_module("transformers")         # a GPU-host package, as torchvision above
        cfg = (tr.BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64) if s else tr.BertConfig())
        return tr.BertForMaskedLM(cfg)

    def bert_inputs(b, dev):
        ids = torch.randint(0, vocab_bert, (b, seq), device=dev)
        return (ids,), ids

    def bert_loss(out, ids):                 # the MLM loss with every token a label
        return _ce(out.logits.reshape(-1, out.logits.shape[-1]), ids.reshape(-1))
    cases.append(DnnCase("bert_base", bert, tiny or (32,), bert_inputs, bert_loss, lambda b: [b, seq],
                         "BertForMaskedLM(BertConfig()) (smoke: a 1-layer, 32-wide config), "
                         "cross-entropy of the MLM logits against the input ids"))
    steps, vocab, hid = (5, 100, 32) if s else (35, 10_000, 1500)
    cases.append(DnnCase(
        "lstm_lm", lambda: LstmLM(vocab, hid), tiny or (20,),
        lambda b, dev: ((torch.randint(0, vocab, (steps, b), device=dev),),
                        torch.randint(0, vocab, (steps * b,), device=dev)),
        lambda out, t: _ce(out.reshape(-1, out.shape[-1]), t), lambda b: [steps, b],
        "Zaremba et al. 2014 large: nn.LSTM(1500, 1500, 2 layers), vocab 10k, 35 steps"))
    users, items, gmf, mlp = (100, 50, 8, (16, 16, 8, 4)) if s else (138_493, 26_744, 64, (256, 256, 128, 64))
    cases.append(DnnCase(
        "ncf_neumf", lambda: NeuMF(users, items, gmf, mlp), (256,) if s else (65_536,),
        lambda b, dev: ((torch.randint(0, users, (b,), device=dev), torch.randint(0, items, (b,), device=dev)),
                        (torch.rand(b, device=dev) < 0.5).float()),
        lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out, t), lambda b: [b],
        "MovieLens-20M sizes (hosts/lhc/profiles.py), dense embedding gradients, BCE with logits"))
    return cases


def time_fwd_bwd(model: torch.nn.Module, case: DnnCase, batch: int, dev: torch.device, bf16: bool,
                 sz: Sizes) -> list[float]:
    args, target = case.inputs(batch, dev)

    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = case.loss(model(*args), target)
        loss.backward()
    return wall_ms(step, dev, sz.dnn_reps, sz.dnn_warmup)


def part_fwd_bwd(dev: torch.device, sz: Sizes, budget: Budget, res: Results) -> dict:
    torch.backends.cudnn.benchmark = True
    # fp32 is strict fp32 (no TF32 tensor cores): the papers' V100s had none, and an fp32
    # number that silently used TF32 would flatter the H100 by several times.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, Any] = {
        "clock": f"perf_counter, sync before and after each forward+backward, median of {sz.dnn_reps} after "
                 f"{sz.dnn_warmup} warm-ups (the first includes cudnn.benchmark's search)",
        "note": "no optimizer step; gradients set to None before each mini-batch; bf16 = torch.autocast",
        # as set above: strict fp32 (TF32 off) for the fp32 runs
        "tf32": {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                 "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                 "float32_matmul_precision": torch.get_float32_matmul_precision()},
        "models": {}}
    res.doc["fwd_bwd"] = out
    for case in dnn_cases(sz):
        rec: dict[str, Any] = {"note": case.note, "runs": []}
        out["models"][case.name] = rec
        if budget.left_s() < 10:
            rec["skipped"] = "time budget"
            continue
        log(f"fwd_bwd {case.name} ...")
        try:
            model = case.build().to(dev).train()
        except Exception as exc:
            rec.update(error_record(exc))
            res.save()
            continue
        rec["params"] = sum(p.numel() for p in model.parameters())
        attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
        if attn is not None:                 # transformers picks sdpa / eager itself: say which ran
            rec["attn_implementation"] = attn
        for batch in case.batches:
            for bf16 in (False, True):
                run = {"batch": batch, "precision": "bf16_autocast" if bf16 else "fp32",
                       "input_shape": case.input_shape(batch)}
                if budget.left_s() < 8:
                    run["skipped"] = "time budget"
                else:
                    try:
                        reset_peak(dev)
                        ms = time_fwd_bwd(model, case, batch, dev, bf16, sz)
                        run.update(summary(ms, "ms"))
                        run["samples_per_s"] = batch / (statistics.median(ms) * 1e-3)
                        run["peak_mem_GiB"] = peak_gib(dev)
                    except Exception as exc:
                        run.update(error_record(exc))
                    free_memory(dev)
                rec["runs"].append(run)
                log(f"fwd_bwd {case.name} b{batch} {run['precision']}: "
                    f"{run.get('median_ms', run.get('error', run.get('skipped')))}")
                res.save()
        del model
        free_memory(dev)
    return out
