"""
The baseline configs of training_configs/pretrain/ (Li et al. 2019, Tables 1, 3 and 4): each
variant builds and trains on the fixture corpus, its loss goes down, the Table 3 rows use a
trained ELMo's character CNN, frozen, and at paper size the parameter counts are the paper's
(built on the meta device: nothing is allocated).
"""

import copy
import json
import math
import os
from pathlib import Path

import pytest
import torch

from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.training.optimizers import Optimizer

import elmoc_allennlp  # noqa: F401  (registers the package's components)
import elmoc_allennlp.models.bidirectional_language_model  # noqa: F401
import elmoc_allennlp.modules.output_layers.adaptive_softmax  # noqa: F401
import elmoc_allennlp.modules.output_layers.continuous_output  # noqa: F401
import elmoc_allennlp.modules.output_layers.sampled_softmax  # noqa: F401
import elmoc_allennlp.modules.output_layers.softmax  # noqa: F401
import elmoc_allennlp.data.tokenizers.sentencepiece_bpe_tokenizer  # noqa: F401
import elmoc_allennlp.data.token_indexers.fasttext_subword_indexer  # noqa: F401
import elmoc_allennlp.data.dataset_readers.lm_corpus_reader  # noqa: F401
import elmoc_allennlp.modules.token_embedders.fasttext_token_embedder  # noqa: F401
import elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm  # noqa: F401
import elmoc_allennlp.training.rnmt_plus_learning_rate  # noqa: F401

try:  # the configs' checkpointer, until the package __init__ registers it
    import elmoc_allennlp.training.atomic_checkpointer  # noqa: F401
except ImportError:
    pass

from tests.conftest import FIXTURES_ROOT

CONFIGS = Path(__file__).resolve().parents[3] / "training_configs" / "pretrain"
VARIANTS = [
    "elmo",
    "elmo_a",
    "elmo_sub",
    "elmoc_oneb",
    "elmoc_rnd",
    "elmoc_cnn_cc",
    "elmoc_cc_cnn",
    "elmoc_cnn_cnn",
    "sampled",
    "fixed",
    "full",
]
SOFTMAX_FAMILY = {"elmo", "elmo_a", "elmo_sub", "sampled", "fixed", "full"}
# Table 3: the CNN of a trained ELMo as input (CNN-CC), as targets (CC-CNN) or both (CNN-CNN).
TABLE_3 = {
    "elmoc_cnn_cc": ["_text_field_embedder"],
    "elmoc_cc_cnn": ["_target_embedder"],
    "elmoc_cnn_cnn": ["_text_field_embedder"],
}
CNN = ".token_embedder_elmo_characters."

TINY_SETTINGS = {
    "projection_dim": 6,
    "cell_dim": 10,
    "batch_size": 8,
    "num_epochs": 1,
    "learning_rate": 0.01,
    "warmup_steps": 2,
    "decay_start": 4,
    "decay_end": 12,
    "num_replicas": 1,
    "num_samples": 80,
    "cutoffs": [20, 60],
    "div_value": 2.0,
    "bpe_vocab_size": 300,
    "char_cnn_filters": [[1, 4], [2, 4], [3, 8]],
    "char_cnn_highway_layers": 1,
    "char_cnn_dim": 8,
}


@pytest.fixture(scope="session")
def tiny_elmo_archive(tmp_path_factory) -> Path:
    """A trained tiny ELMo (char CNN + sampled softmax), the CNN source of the Table 3 rows."""
    directory = tmp_path_factory.mktemp("tiny_elmo")
    config = tiny_config("elmo", directory, num_epochs=2)
    train_model(Params.from_file(str(config)), str(directory / "run"))
    return directory / "run" / "model.tar.gz"


def tiny_config(variant: str, tmp_path: Path, elmo_archive: Path = None, **overrides) -> Path:
    settings = dict(TINY_SETTINGS, **overrides)
    if elmo_archive is not None:
        settings["elmo_archive"] = str(elmo_archive)
    fixtures = FIXTURES_ROOT / "lm_corpus"
    settings.update(
        fasttext_path=os.environ["ELMOC_TEST_FASTTEXT"],
        embedding_dim=16,
        train_data_path=str(fixtures / "train-*.txt"),
        validation_data_path=str(fixtures / "valid.txt"),
        # A BPE model per test directory: the cache would be shared across runs.
        bpe_training_sentences=1000,
    )
    text = (
        f"local baselines = import '{CONFIGS / 'baselines.libsonnet'}';\n"
        f"baselines.variant('{variant}', {json.dumps(settings)})"
    )
    path = tmp_path / f"{variant}.jsonnet"
    path.write_text(text)
    return path


def build(config: Path):
    params = Params.from_file(str(config))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(params.pop("train_data_path")))
    vocab = Vocabulary.from_params(params.pop("vocabulary"), instances=instances)
    model = Model.from_params(vocab=vocab, params=params.pop("model"))
    return model, instances, vocab, params


def optimizer_of(model: Model, params: Params, lr: float) -> torch.optim.Optimizer:
    """The config's optimizer (its parameter groups freeze what the config freezes), at `lr`."""
    optimizer_params = params["trainer"]["optimizer"].duplicate()
    optimizer_params["lr"] = lr
    return Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=optimizer_params
    )


@pytest.fixture(autouse=True)
def bpe_cache_in_tmp(tmp_path, monkeypatch):
    import elmoc_allennlp.data.tokenizers.sentencepiece_bpe_tokenizer as bpe

    monkeypatch.setattr(bpe, "DEFAULT_BPE_CACHE", str(tmp_path / "bpe_cache"))


@pytest.fixture
def archive_for(request):
    """The tiny ELMo archive for the Table 3 rows (built once, only when one is tested)."""
    return lambda variant: (
        request.getfixturevalue("tiny_elmo_archive") if variant in TABLE_3 else None
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_builds_and_its_loss_decreases(variant, tmp_path, archive_for):
    torch.manual_seed(0)
    model, instances, vocab, params = build(tiny_config(variant, tmp_path, archive_for(variant)))
    assert model._output_layer.requires_target_ids == (variant in SOFTMAX_FAMILY)
    batch = Batch(instances[:16])
    batch.index_instances(vocab)
    tensors = batch.as_tensor_dict()

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            return model(**tensors)["loss"].item()

    before = eval_loss()
    assert math.isfinite(before)
    optimizer = optimizer_of(model, params, lr=0.02)
    model.train()
    for _ in range(30):
        optimizer.zero_grad()
        model(**tensors)["loss"].backward()
        optimizer.step()
    after = eval_loss()
    assert after < 0.93 * before, (before, after)


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_trains_with_allennlp_train(variant, tmp_path, archive_for):
    config = tiny_config(variant, tmp_path, archive_for(variant))
    serialization_dir = tmp_path / "run"
    train_model(Params.from_file(str(config)), str(serialization_dir))
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    assert math.isfinite(metrics["training_loss"])
    assert math.isfinite(metrics["validation_loss"])


@pytest.mark.parametrize("variant", sorted(TABLE_3))
def test_table_3_rows_use_the_trained_elmo_cnn_frozen(variant, tmp_path, tiny_elmo_archive):
    elmo = load_archive(str(tiny_elmo_archive)).model.state_dict()
    elmo_cnn = {k.split(CNN)[1]: v for k, v in elmo.items() if CNN in k}
    assert elmo_cnn
    config = tiny_config(variant, tmp_path, tiny_elmo_archive)
    model, instances, vocab, params = build(config)
    optimizer_of(model, params, lr=0.01)
    for embedder in TABLE_3[variant]:
        cnn = {
            n.split(CNN)[1]: p for n, p in model.named_parameters() if n.startswith(embedder + CNN)
        }
        assert cnn.keys() == elmo_cnn.keys()
        for name, parameter in cnn.items():
            assert torch.equal(parameter, elmo_cnn[name]), name
            assert not parameter.requires_grad, name
    # Through `allennlp train`: the CNN in the archive is still the ELMo's, everything else moved.
    run = tmp_path / "run"
    train_model(Params.from_file(str(config)), str(run))
    trained = load_archive(str(run / "model.tar.gz")).model.state_dict()
    for embedder in TABLE_3[variant]:
        for name, value in elmo_cnn.items():
            assert torch.equal(trained[embedder + CNN + name], value), name
    metrics = json.loads((run / "metrics.json").read_text())
    # A frozen CNN cannot make the targets collapse onto one vector (a near-zero loss).
    assert metrics["validation_loss"] > 0.05 and metrics["training_loss"] > 0.05


def test_table_3_rows_need_an_elmo_archive(tmp_path):
    with pytest.raises(RuntimeError, match="elmo_archive .* is required for the Table 3 rows"):
        Params.from_file(str(tiny_config("elmoc_cc_cnn", tmp_path)))


def test_rnd_targets_are_frozen_standard_normal(tmp_path):
    model, _, vocab, _ = build(tiny_config("elmoc_rnd", tmp_path, embedding_dim=16))
    weight = model._target_embedder._token_embedders["targets"].weight
    assert not weight.requires_grad
    assert weight.size(0) == vocab.get_vocab_size("targets")
    assert abs(weight.mean().item()) < 0.1 and abs(weight.std().item() - 1.0) < 0.1


def test_subword_model_ties_input_and_output_embeddings(tmp_path):
    model, _, vocab, _ = build(tiny_config("elmo_sub", tmp_path))
    embedding = model._text_field_embedder._token_embedders["subwords"]
    assert model._output_layer.weight is embedding.weight
    assert embedding.weight.size(0) == vocab.get_vocab_size("subwords")
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.startswith("_output_layer.weight") for name in names)  # counted once


def test_bad_tie_keys_name_the_config_key(tmp_path):
    config = tiny_config("elmo_sub", tmp_path)
    model, instances, vocab, _ = build(config)
    model_params = Params.from_file(str(config)).pop("model").as_dict()
    with pytest.raises(ConfigurationError, match="tie_output_embedding is 'words'"):
        Model.from_params(
            vocab=vocab,
            params=Params(dict(copy.deepcopy(model_params), tie_output_embedding="words")),
        )
    continuous = Params.from_file(str(tiny_config("elmoc_oneb", tmp_path))).pop("model").as_dict()
    continuous["tie_output_embedding"] = "fasttext"
    with pytest.raises(ConfigurationError, match="has no output embedding to tie"):
        Model.from_params(vocab=Vocabulary.empty(), params=Params(continuous))


def test_fixed_output_embedding_is_frozen_fasttext(tmp_path):
    model, _, _, _ = build(tiny_config("fixed", tmp_path))
    head = model._output_layer
    assert not head.weight.requires_grad and head.weight.size(1) == 16
    assert "_output_layer.weight" not in dict(model.named_parameters())


def test_small_config_evaluates_for_every_variant():
    import _jsonnet

    env = {
        "ELMOC_FASTTEXT": "ptb.bin",
        "ELMOC_TRAIN_DATA": "ptb.train.txt",
        "ELMOC_VALIDATION_DATA": "ptb.valid.txt",
    }
    small = json.loads(_jsonnet.evaluate_file(str(CONFIGS / "elmoc_small.jsonnet"), ext_vars=env))
    for variant in VARIANTS:
        env = {
            "ELMOC_BASELINE": variant,
            "ELMOC_ELMO_ARCHIVE": "elmo.tar.gz",
            "ELMOC_FASTTEXT": "ptb.bin",
            "ELMOC_TRAIN_DATA": "ptb.train.txt",
            "ELMOC_VALIDATION_DATA": "ptb.valid.txt",
        }
        config = json.loads(
            _jsonnet.evaluate_file(str(CONFIGS / "baselines_small.jsonnet"), ext_vars=env)
        )
        # The quickstart model's sizes and schedule.
        for key in ("cell_dim", "projection_dim", "num_layers"):
            assert config["model"]["contextualizer"][key] == small["model"]["contextualizer"][key]
        assert config["data_loader"] == small["data_loader"]
        assert config["trainer"]["num_epochs"] == small["trainer"]["num_epochs"]
        assert (
            config["trainer"]["learning_rate_scheduler"]
            == small["trainer"]["learning_rate_scheduler"]
        )
    with pytest.raises(RuntimeError, match="unknown baseline"):
        _jsonnet.evaluate_file(
            str(CONFIGS / "baselines_small.jsonnet"), ext_vars=dict(env, ELMOC_BASELINE="nope")
        )


# ----------------------------------------------------------------------------- paper sizes


class SizedVocabulary(Vocabulary):
    """A vocabulary that only knows the sizes of its namespaces (paper sizes, no strings)."""

    def __init__(self, sizes):
        super().__init__()
        self._sizes = sizes

    def get_vocab_size(self, namespace: str = "tokens") -> int:
        return self._sizes.get(namespace, 2)


@pytest.fixture(scope="module")
def fasttext_300d(tmp_path_factory):
    import numpy as np

    from benchmarks.common import write_fasttext_bin

    path = tmp_path_factory.mktemp("ft300") / "tiny300.bin"
    words = ["</s>", "the", "a"]
    matrix = np.random.RandomState(0).randn(len(words) + 10, 300).astype("float32")
    return write_fasttext_bin(path, words, matrix, minn=3, maxn=6, bucket=10)


def trainable_parameters_at_paper_size(config: str, fasttext: Path, overrides=None, sizes=None):
    env = {
        "ELMOC_FASTTEXT": str(fasttext),
        "ELMOC_TRAIN_DATA": "unused",
        "ELMOC_VALIDATION_DATA": "unused",
    }
    params = Params.from_file(str(CONFIGS / config), json.dumps(overrides or {}), ext_vars=env)
    vocab = SizedVocabulary(sizes or {})
    with torch.device("meta"):
        model = Model.from_params(vocab=vocab, params=params.pop("model"))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# (config, vocabulary cap, overrides, paper's count in millions, tolerance in millions)
PAPER_SIZES = [
    ("elmoc.jsonnet", None, {}, 76, 1.0),
    ("sampled_softmax.jsonnet", 40000, {}, 96, 1.0),
    ("sampled_softmax.jsonnet", 793471, {}, 483, 1.0),
    ("sampled_softmax.jsonnet", 2000000, {}, 1102, 1.0),
    (
        "elmo_a.jsonnet",
        40000,
        {"model.output_layer.cutoffs": [10000, 20000, 30000], "model.output_layer.div_value": 1},
        97,
        0.5,
    ),
    ("elmo_a.jsonnet", 793471, {}, 196, 0.5),
    (
        "elmo_a.jsonnet",
        2000000,
        {"model.output_layer.cutoffs": [100000, 400000, 1850000]},
        213,
        0.5,
    ),
]


@pytest.mark.needs_meta_device
@pytest.mark.parametrize("config,cap,overrides,paper,tolerance", PAPER_SIZES)
def test_parameter_counts_match_the_paper(config, cap, overrides, paper, tolerance, fasttext_300d):
    sizes = {} if cap is None else {"targets": cap + 2}  # + padding and @@UNKNOWN@@
    count = trainable_parameters_at_paper_size(config, fasttext_300d, overrides, sizes)
    assert abs(count / 1e6 - paper) <= tolerance, count


@pytest.mark.needs_meta_device
def test_subword_parameter_count_matches_the_paper(fasttext_300d):
    # 32,000 pieces + padding, @@UNKNOWN@@, <S>, </S>.
    count = trainable_parameters_at_paper_size(
        "elmo_sub.jsonnet", fasttext_300d, sizes={"subwords": 32004}
    )
    assert abs(count / 1e6 - 92) <= 0.5, count


@pytest.mark.needs_meta_device
def test_elmo_has_a_char_cnn_and_a_793k_sampled_softmax(fasttext_300d):
    count = trainable_parameters_at_paper_size(
        "elmo.jsonnet", fasttext_300d, sizes={"targets": 793473}
    )
    softmax = 793473 * 513
    assert 17e6 < count - softmax - 75.6e6 < 19e6, count  # ELMo's char CNN: ~18M


def test_sparse_softmax_trains_with_dense_sparse_adam_and_no_norm_clipping(tmp_path):
    config = tiny_config("sampled", tmp_path, sparse_softmax=True)
    params = Params.from_file(str(config))
    assert params["trainer"]["optimizer"]["type"] == "dense_sparse_adam"
    assert params["trainer"]["grad_norm"] is False
    train_model(params, str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert math.isfinite(metrics["training_loss"])


@pytest.mark.needs_meta_device
@pytest.mark.parametrize(
    "config, trainable",
    [
        # Encoder 75,567,104 (4 LSTM layers), a shared 512 -> 512 input projection (263,680) or
        # two 300 -> 512 ones (310,272), two heads 512 -> 300 (307,800) or 512 -> 512 (525,312).
        ("elmoc_cnn_cc.jsonnet", 75_567_104 + 263_680 + 307_800),
        ("elmoc_cc_cnn.jsonnet", 75_567_104 + 310_272 + 525_312),
        ("elmoc_cnn_cnn.jsonnet", 75_567_104 + 263_680 + 525_312),
    ],
)
def test_table_3_trainable_parameters_at_paper_size(config, trainable, fasttext_300d):
    import re

    env = {
        "ELMOC_ELMO_ARCHIVE": "unused.tar.gz",
        "ELMOC_FASTTEXT": str(fasttext_300d),
        "ELMOC_TRAIN_DATA": "unused",
        "ELMOC_VALIDATION_DATA": "unused",
    }
    params = Params.from_file(str(CONFIGS / config), ext_vars=env)
    model_params = params.pop("model")
    model_params.pop("initializer")  # copies the ELMo's CNN: nothing to copy on the meta device
    with torch.device("meta"):
        model = Model.from_params(vocab=Vocabulary.empty(), params=model_params)
    ((frozen, _),) = params["trainer"]["optimizer"]["parameter_groups"]
    frozen_names = [n for n, _ in model.named_parameters() if any(re.search(r, n) for r in frozen)]
    cnn = sum(p.numel() for n, p in model.named_parameters() if n in frozen_names)
    assert 17e6 < cnn < 19e6  # ELMo's char CNN, frozen
    count = sum(p.numel() for n, p in model.named_parameters() if n not in frozen_names)
    assert count == trainable
