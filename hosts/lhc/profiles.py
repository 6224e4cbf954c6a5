"""Per-model gradient profiles: layer sizes and how sparse each layer's gradient is.

Each layer: (name, parameters, density, cluster, union). density = share of the
layer's gradient entries that are nonzero in one worker's mini-batch; cluster =
length of the runs nonzeros come in (an embedding row touched by a batch is a
run of `dim` consecutive nonzeros); union = ((workers, share nonzero in at
least one worker's gradient), ...) at 2, 4 and 8 workers. Tags: [V] verified
from the cited source, [M] measured by this project, [A] assumed (change it and
the result follows).
Emulating 100M-parameter gradients on 2 shared cores is out of reach, so
`GradientSource` shrinks every layer by `size_scale` (default per profile)
and keeps densities and run lengths: the byte ratios are the profile's, the
absolute sizes are not.

Densities and unions [M: testbed/reproduce/measurements/data/lhc_density_2026-11-27.json,
`python -m testbed.reproduce.measurements.lhc_density --out <that file>`; mean over 8
training steps, each worker its own mini-batch; tests/unit/test_lhc_density.py checks
that the numbers below are the file's]. Embedding tables were measured at their real
vocabularies with the profile's batch; dense layers in small PyTorch versions of the
networks (exact zeros only). Ids (users, items, tokens) are Zipf-distributed, s = 1 [A]:
no MovieLens / PTB / Wikipedia data offline; the file's touch_sweep gives the range
(uniform ids touch the most rows). No sparsification before compression [A: the paper's
is not in the stored material; the demo sparsifies nothing and the abstract says
lossless]; VGG19's top-k alternative is in the file. docs/lhc.md has the table.

NCF   NeuMF on MovieLens-20M (MLPerf v0.6 reference): 138,493 users and
      26,744 items [V: MovieLens-20M README], GMF dim 64 + MLP dim 128
      embeddings [A: MLPerf NCF config's factors 64, layers 256-256-128-64],
      a batch of 1M samples? [A: we take 65,536 samples: 13,107 positives, 4
      uniform negatives each]: 4.0 % of the users per worker (12 % at 4 workers,
      11-32 % from Zipf 1.2 to uniform ids), 88 % of the items (the negatives
      alone touch 86 %; all of them at 4 workers) [M]; MLP layers dense [M].
LSTM  2-layer LSTM language model, 1500 hidden, vocab 10k (Zaremba et al.
      2014, "large": 66M parameters [V: paper]); a 20 x 35 token batch touches
      3.8 % of the embedding rows (11 % at 4 workers; 6.8 % per worker with
      uniform tokens) [M]; LSTM weights dense [M]; the full softmax's gradient is
      dense (every vocabulary row gets p - y) [M].
VGG19 143.7M parameters [V: torchvision model card]. Its weight gradients hold
      exact zeros where a ReLU unit is silent over the whole batch: 85 % of the
      convolutions' and 62 % of the FC layers' entries nonzero per worker [M: a
      width/16 VGG19 on 224 x 224 synthetic images, batch 32]; synthetic images are
      alike, natural ones may leave fewer silent units: up to 1.0 [A].
BERT  BERT-base, 110M parameters [V: Devlin et al. 2019]: word embedding
      30,522 x 768 [V], of which a 32 x 128 token batch touches 5.9 % of the rows
      in fine-tuning (17 % at 4 workers) [M]; with the masked-LM head (pre-training,
      decoder tied to the word embedding) every row gets a gradient [M: bert_mlm in
      the file]; which the paper trained is not in the stored material, fine-tuning
      taken [A]; position (512 x 768) and token-type (2 x 768) embeddings: 128 of 512
      positions and 1 of 2 types [M]; the 12 encoder layers and the rest dense [M].
compute_ms: backward pass per mini-batch on one V100 [A: order of magnitude
from public V100 throughput tables; only the iteration time uses it, as the
iteration's whole compute step: the worker models no separate forward].
Beside it, forward + backward of the same networks measured on one H100 SXM
(testbed/reproduce/measurements/data/gpu_h100_2026-11-26.json, bench/gpu_constants.py),
fp32 with TF32 off / bf16 autocast, ms per mini-batch:
      NCF   b65,536  3.6 / 4.4    (compute_ms 8)
      LSTM  b20x35  11.1 / 7.6    (compute_ms 25)
      VGG19 b32     68.4 / 19.7   (compute_ms 90)
      BERT  b32x128 72.8 / 33.5   (compute_ms 60; BertForMaskedLM: the MLM head included)
An H100 is faster than a V100 at the same precision, so these are lower bounds
for a V100, not V100 values: NCF, LSTM and VGG19's compute_ms lie above their fp32
bounds; BERT's 60 ms lies below the H100's fp32 72.8 ms (the MLM decoder is part
of that) and above its bf16 33.5 ms: as a V100 time it needs mixed precision or a
step without the MLM head. The reproduction (testbed/reproduce/papers/lhc.py) models
NCF and the LSTM with hosts/dnn/device.py instead and scales VGG19 / BERT-base by
an assumed constant whose text gives these bounds.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    params: int
    density: float
    cluster: int = 1
    union: tuple[tuple[int, float], ...] = ()    # measured (workers, union density); () where dense

    def union_at(self, workers: int) -> float:
        """The measured union density at `workers` (a measured count: 2, 4 or 8; 1 is the density)."""
        if workers == 1:
            return self.density
        if self.density >= 1.0:
            return 1.0
        got = dict(self.union)
        if workers not in got:
            raise ValueError(f"layer {self.name}: union measured at {sorted(got)} workers, not {workers}")
        return got[workers]


@dataclass(frozen=True)
class Profile:
    name: str
    layers: tuple[Layer, ...]
    compute_ms: float          # modeled backward time on the target GPU [A]
    size_scale: float          # default shrink factor for emulation
    source: str

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def density(self) -> float:
        return sum(layer.params * layer.density for layer in self.layers) / self.params


_M = "[M: measurements/data/lhc_density_2026-11-27.json]"
_BERT_POS_TYPE = 512 * 768 + 2 * 768

PROFILES: dict[str, Profile] = {
    "ncf": Profile("ncf", (
        Layer("user_gmf", 138_493 * 64, 0.04041, 64, ((2, 0.07047), (4, 0.1199), (8, 0.1981))),
        Layer("item_gmf", 26_744 * 64, 0.8822, 64, ((2, 0.9859), (4, 0.9997), (8, 1.0))),
        Layer("user_mlp", 138_493 * 128, 0.04041, 128, ((2, 0.07047), (4, 0.1199), (8, 0.1981))),
        Layer("item_mlp", 26_744 * 128, 0.8816, 128, ((2, 0.9857), (4, 0.9997), (8, 1.0))),
        Layer("mlp", 256 * 256 + 256 * 128 + 128 * 64 + 64 + 128, 1.0),
    ), compute_ms=8.0, size_scale=1 / 32,
        source=f"MovieLens-20M sizes [V], MLPerf NCF dims [A], densities {_M} with Zipf ids [A]"),
    "lstm": Profile("lstm", (
        Layer("embedding", 10_000 * 1500, 0.0384, 1500, ((2, 0.06722), (4, 0.1149), (8, 0.1895))),
        Layer("lstm", 2 * 4 * (1500 * 1500 * 2 + 1500), 1.0),
        Layer("softmax", 10_000 * 1500, 1.0, 1500),
    ), compute_ms=25.0, size_scale=1 / 64,
        source=f"Zaremba et al. 2014 large LSTM [V], densities {_M} with Zipf tokens [A]"),
    "vgg19": Profile("vgg19", (
        Layer("conv", 20_024_384, 0.8546, 1, ((2, 0.8653), (4, 0.876), (8, 0.8842))),
        Layer("fc", 123_642_856, 0.6182, 1, ((2, 0.6395), (4, 0.6523), (8, 0.6634))),
    ), compute_ms=90.0, size_scale=1 / 128,
        source=f"torchvision vgg19 143,667,240 params [V], densities {_M} on synthetic images (up to 1.0 [A])"),
    "bert": Profile("bert", (
        Layer("word_embedding", 30_522 * 768, 0.05942, 768, ((2, 0.101), (4, 0.1695), (8, 0.275))),
        Layer("position_type", _BERT_POS_TYPE, 0.251, 768, ((2, 0.251), (4, 0.251), (8, 0.251))),
        Layer("encoder_and_rest", 109_482_240 - 30_522 * 768 - _BERT_POS_TYPE, 1.0),
    ), compute_ms=60.0, size_scale=1 / 128,
        source=f"Devlin et al. 2019 BERT-base [V], fine-tuning [A], densities {_M} with Zipf tokens [A]"),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown model profile {name!r}; known: {', '.join(PROFILES)}") from None
