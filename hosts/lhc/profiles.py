"""Per-model gradient profiles: layer sizes and how sparse each layer's gradient is.

Each layer: (name, parameters, density, cluster). density = share of the
layer's gradient entries that are nonzero in one worker's mini-batch; cluster =
length of the runs nonzeros come in (an embedding row touched by a batch is a
run of `dim` consecutive nonzeros). Tags: [V] verified from the cited source,
[A] assumed (no measurement in the store; change it and the result follows).
Emulating 100M-parameter gradients on 2 shared cores is out of reach, so
`GradientSource` shrinks every layer by `size_scale` (default per profile)
and keeps densities and run lengths: the byte ratios are the profile's, the
absolute sizes are not.

NCF   NeuMF on MovieLens-20M (MLPerf v0.6 reference): 138,493 users and
      26,744 items [V: MovieLens-20M README], GMF dim 64 + MLP dim 128
      embeddings [A: MLPerf NCF config's factors 64, layers 256-256-128-64],
      a batch of 1M samples? [A: we take 65,536 samples] touches ~30 % of the
      users and ~70 % of the items [A]; MLP layers dense.
LSTM  2-layer LSTM language model, 1500 hidden, vocab 10k (Zaremba et al.
      2014, "large": 66M parameters [V: paper]); a 20 x 35 token batch touches
      ~700 of 10k embedding / softmax rows [A]; LSTM weights dense.
VGG19 143.7M parameters [V: torchvision model card]; every gradient entry is
      nonzero (dense convolutions and FC layers) [A: ReLU zeros are in
      activations, not weight gradients]. LHC cannot compress it: the profile
      is there to show that.
BERT  BERT-base, 110M parameters [V: Devlin et al. 2019]: word embedding
      30,522 x 768 [V], of which a 32 x 128 token batch touches ~2,500 rows
      [A]; position/type embeddings and the 12 encoder layers (85M) dense [A].
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


PROFILES: dict[str, Profile] = {
    "ncf": Profile("ncf", (
        Layer("user_gmf", 138_493 * 64, 0.30, 64), Layer("item_gmf", 26_744 * 64, 0.70, 64),
        Layer("user_mlp", 138_493 * 128, 0.30, 128), Layer("item_mlp", 26_744 * 128, 0.70, 128),
        Layer("mlp", 256 * 256 + 256 * 128 + 128 * 64 + 64 + 128, 1.0),
    ), compute_ms=8.0, size_scale=1 / 32, source="MovieLens-20M sizes [V], MLPerf NCF dims [A], touch rates [A]"),
    "lstm": Profile("lstm", (
        Layer("embedding", 10_000 * 1500, 700 / 10_000, 1500),
        Layer("lstm", 2 * 4 * (1500 * 1500 * 2 + 1500), 1.0),
        Layer("softmax", 10_000 * 1500, 700 / 10_000, 1500),
    ), compute_ms=25.0, size_scale=1 / 64, source="Zaremba et al. 2014 large LSTM [V], touch rate [A]"),
    "vgg19": Profile("vgg19", (
        Layer("conv", 20_024_384, 1.0), Layer("fc", 123_642_856, 1.0),
    ), compute_ms=90.0, size_scale=1 / 128, source="torchvision vgg19 143,667,240 params [V], dense [A]"),
    "bert": Profile("bert", (
        Layer("word_embedding", 30_522 * 768, 2_500 / 30_522, 768),
        Layer("encoder_and_rest", 109_482_240 - 30_522 * 768, 1.0),
    ), compute_ms=60.0, size_scale=1 / 128, source="Devlin et al. 2019 BERT-base [V], touch rate [A]"),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown model profile {name!r}; known: {', '.join(PROFILES)}") from None
