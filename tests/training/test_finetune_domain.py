"""
Fine-tuning a biLM archive on new text with `training_configs/pretrain/finetune_domain.jsonnet`:
which layers train in which epoch (gradual unfreezing, discriminative learning rates), that the
new archive is an ordinary biLM archive for every downstream tool, and that the archive's
fastText model cannot be swapped for another.
"""
import json
import re
import shutil
from pathlib import Path
from typing import Dict, List

import h5py
import numpy
import pytest
import torch

from allennlp.commands.evaluate import evaluate_from_archive
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules
from allennlp.data import Token, Vocabulary
from allennlp.models.archival import load_archive

from elmoc_allennlp.common.fasttext_training import train_fasttext
from elmoc_allennlp.downstream.indexers import ArchiveFastTextIndexer
from elmoc_allennlp.downstream.indexers import BilmArchiveIndexer
from elmoc_allennlp.downstream.archive import same_fasttext_model
from elmoc_allennlp.models.bilm_from_archive import BilmFromArchive
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder
from elmoc_allennlp.models.bidirectional_language_model import BidirectionalLanguageModel
from elmoc_allennlp.training.gradual_unfreezing import RecoverableSlantedTriangular
from elmoc_allennlp.common import torch_versions
from tests.conftest import FIXTURES_ROOT, LM_CORPUS, TINY_FASTTEXT_OPTIONS

REPO_ROOT = Path(__file__).resolve().parents[2]
FINETUNE_CONFIG = REPO_ROOT / "training_configs" / "pretrain" / "finetune_domain.jsonnet"
# The tiny biLM (tests/fixtures/elmoc_tiny.jsonnet) has 2 LSTM layers: 4 groups.
GROUPS = ["layer 0", "layer 1", "layer 2", "output"]
SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]

import_module_and_submodules("elmoc_allennlp")


@pytest.fixture(autouse=True)
def one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def base_archive(tiny_fasttext_path, tmp_path_factory) -> Path:
    """A tiny biLM pretrained for one epoch on the fixture corpus."""
    serialization_dir = tmp_path_factory.mktemp("base_bilm") / "run"
    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"),
        str(serialization_dir),
        overrides=json.dumps({"trainer.num_epochs": 1}),
    )
    return serialization_dir / "model.tar.gz"


def finetune(
    archive: Path, serialization_dir: Path, monkeypatch, overrides: Dict = None
) -> Path:
    monkeypatch.setenv("ELMOC_ARCHIVE", str(archive))
    monkeypatch.setenv("ELMOC_TRAIN_DATA", str(LM_CORPUS / "train-*.txt"))
    monkeypatch.setenv("ELMOC_VALIDATION_DATA", str(LM_CORPUS / "valid.txt"))
    settings = {"data_loader.batch_sampler.batch_size": 8}
    settings.update(overrides or {})
    train_model_from_file(str(FINETUNE_CONFIG), str(serialization_dir), json.dumps(settings))
    return serialization_dir / "model.tar.gz"


@pytest.fixture(scope="module")
def finetuned(base_archive, tmp_path_factory):
    """
    Four epochs (one per layer group) from a copy of the base archive, keeping every epoch's
    checkpoint; the copy is deleted afterwards, so the result must not need it.
    """
    monkeypatch = pytest.MonkeyPatch()
    copy_dir = tmp_path_factory.mktemp("base_copy")
    base_copy = Path(shutil.copy(base_archive, copy_dir / "model.tar.gz"))
    serialization_dir = tmp_path_factory.mktemp("finetuned") / "run"
    try:
        archive = finetune(
            base_copy,
            serialization_dir,
            monkeypatch,
            {"trainer.num_epochs": 4, "trainer.checkpointer.keep_most_recent_by_count": None},
        )
    finally:
        monkeypatch.undo()
    shutil.rmtree(copy_dir)
    return archive, serialization_dir


def _base_state(archive: Path) -> Dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in load_archive(str(archive)).model.state_dict().items()}


def _epoch_states(serialization_dir: Path) -> List[Dict[str, torch.Tensor]]:
    paths = sorted(
        serialization_dir.glob("model_state_e*_b0.th"),
        key=lambda path: int(re.search(r"_e(\d+)_", path.name).group(1)),
    )
    return [torch_versions.load_tensors(path) for path in paths]


def _changed_groups(before, after, groups) -> List[str]:
    changed = []
    for label, names in groups:
        differences = [(after[name] - before[name]).abs().max().item() for name in names]
        if max(differences) > 1e-7:
            changed.append(label)
        else:
            # A frozen group gets no gradient and no update: exactly its old values.
            assert all(torch.equal(after[name], before[name]) for name in names), label
    return changed


# ------------------------------------------------------------------------------- layer groups


def test_layer_groups_are_the_bilm_layers_bottom_to_top(base_archive):
    model = load_archive(str(base_archive)).model
    names = [name for name, _ in model.named_parameters()]
    groups = BidirectionalLanguageModel.layer_groups(names)
    assert [label for label, _ in groups] == GROUPS
    assert sorted(name for _, group in groups for name in group) == sorted(names)
    labels = {name: label for label, group in groups for name in group}
    assert labels["_contextualizer.input_projection.weight"] == "layer 0"
    assert labels["_contextualizer.forward_layers.0.input_linearity.weight"] == "layer 1"
    assert labels["_contextualizer.backward_layers.1.state_linearity.weight"] == "layer 2"
    assert labels["_output_layer.projection.weight"] == "output"
    with pytest.raises(ConfigurationError, match="not part of an 'elmoc_bilm' layer"):
        BidirectionalLanguageModel.layer_groups(names + ["_classifier.weight"])


# ------------------------------------------------------------------- what trains in which epoch


def test_gradual_unfreezing_trains_the_top_k_groups_in_epoch_k(base_archive, finetuned):
    archive, serialization_dir = finetuned
    groups = BidirectionalLanguageModel.layer_groups(list(_base_state(base_archive)))
    states = [_base_state(base_archive)] + _epoch_states(serialization_dir)
    assert len(states) == 5
    for epoch in range(4):
        changed = _changed_groups(states[epoch], states[epoch + 1], groups)
        # Epoch 1 trains the output layer, epoch 2 also layer 2, ..., epoch 4 all groups.
        assert changed == GROUPS[3 - epoch :], f"epoch {epoch + 1}"


def test_discriminative_learning_rates_divide_by_2_6_per_layer(finetuned):
    _, serialization_dir = finetuned
    for path in serialization_dir.glob("training_state_e*_b0.th"):
        state = torch_versions.load_trusted(path)
        rates = [group["lr"] for group in state["optimizer"]["param_groups"]]
        assert len(rates) == 5  # 4 layer groups and allennlp's empty default group
        for lower, upper in zip(rates[:3], rates[1:4]):
            assert upper / lower == pytest.approx(2.6, rel=1e-6)
        base_rates = state["learning_rate_scheduler"]["base_values"]
        assert base_rates[3] == pytest.approx(2e-3)
        assert base_rates[0] == pytest.approx(2e-3 / 2.6**3)


def test_resumed_schedule_freezes_the_groups_of_its_epoch():
    def make():
        layers = [torch.nn.Linear(2, 2) for _ in range(4)]
        groups = [{"params": list(layer.parameters())} for layer in layers] + [{"params": []}]
        optimizer = torch.optim.Adam(groups, lr=1e-3)
        scheduler = RecoverableSlantedTriangular(
            optimizer, num_epochs=6, num_steps_per_epoch=3, gradual_unfreezing=True,
            discriminative_fine_tuning=True,
        )
        return scheduler

    first = make()
    assert first.trained_groups() == [False, False, False, True]
    batch = 0
    for epoch in range(2):
        for _ in range(3):
            batch += 1
            first.step_batch(batch)
        first.step()
    assert first.trained_groups() == [False, True, True, True]
    state = first.state_dict()

    resumed = make()  # as the trainer builds it: the first epoch's setting
    assert resumed.trained_groups() == [False, False, False, True]
    resumed.load_state_dict(state)
    assert resumed.trained_groups() == [False, True, True, True]
    assert resumed.get_values() == pytest.approx(first.get_values())


def test_gradual_unfreezing_without_layer_groups_is_a_configuration_error():
    optimizer = torch.optim.Adam(torch.nn.Linear(2, 2).parameters(), lr=1e-3)
    with pytest.raises(ConfigurationError, match="elmoc_bilm_layerwise"):
        RecoverableSlantedTriangular(optimizer, num_epochs=3, gradual_unfreezing=True)


# ------------------------------------------------------------------ the result, downstream


def test_finetuned_archive_is_an_ordinary_bilm_archive(finetuned, tiny_fasttext_path):
    archive, serialization_dir = finetuned
    loaded = load_archive(str(archive))
    config = loaded.config.as_dict()
    assert config["model"]["type"] == "elmoc_bilm"
    assert "archive_file" not in json.dumps(config["model"])
    indexer = config["dataset_reader"]["token_indexers"]["fasttext"]
    assert indexer["type"] == "elmoc_fasttext_subwords"
    assert Path(indexer["vectors_path"]) == Path(tiny_fasttext_path)
    assert indexer.get("lowercase_tokens", False) is False
    original = json.loads((serialization_dir / "config_finetune.json").read_text())
    assert original["model"]["type"] == "elmoc_bilm_from_archive"
    # The archive holds the best epoch's weights.
    best = torch_versions.load_tensors(serialization_dir / "best.th")
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, best[name]), name


def test_finetuned_archive_works_with_every_downstream_tool(
    base_archive, finetuned, tmp_path
):
    archive, _ = finetuned
    tuned = ElmocEmbedder(str(archive))
    general = ElmocEmbedder(str(base_archive))
    tuned_layers = tuned.embed_sentence(SENTENCE)
    assert tuned_layers.shape == (3, len(SENTENCE), 12)
    # Fine-tuning changed the representations (all layers trained in the last epoch).
    assert numpy.abs(tuned_layers - general.embed_sentence(SENTENCE)).max() > 1e-4

    # The hdf5 export gives the API's vectors.
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(" ".join(SENTENCE) + "\n", encoding="utf-8")
    from elmoc_allennlp.commands.elmoc_embed import embed_file

    output = embed_file(str(archive), str(sentences), str(tmp_path / "out.hdf5"), "all")
    with h5py.File(output, "r") as hdf5:
        numpy.testing.assert_allclose(hdf5["0"][()], tuned_layers, atol=1e-5)

    # The token embedder of the downstream configs, with its indexer.
    indexer = BilmArchiveIndexer.from_archive(str(archive))
    embedder = ElmocTokenEmbedder(str(archive), dropout=0.0, scalar_mix_parameters=[-9e10, -9e10, 1])
    indexed = indexer.tokens_to_indices([Token(word) for word in SENTENCE], Vocabulary())
    padded = indexer.as_padded_tensor_dict(indexed, indexer.get_padding_lengths(indexed))
    with torch.no_grad():
        top = embedder(padded["elmo_tokens"].unsqueeze(0))[0]
    numpy.testing.assert_allclose(top.numpy(), tuned_layers[2], atol=1e-5)

    # `allennlp evaluate` reads held-out text with the archive's own reader.
    metrics = evaluate_from_archive(str(archive), str(LM_CORPUS / "valid.txt"))
    assert 0.0 < metrics["loss"] < 2.0 and "retrieval_accuracy" in metrics


# ------------------------------------------------------------------- the archive's fastText


@pytest.fixture(scope="module")
def other_fasttext(tmp_path_factory) -> Path:
    """Another fastText model of the same dimension (trained differently)."""
    directory = tmp_path_factory.mktemp("other_fasttext")
    corpus = directory / "corpus.txt"
    corpus.write_text(
        "".join(path.read_text() for path in sorted(LM_CORPUS.glob("*.txt"))), encoding="utf-8"
    )
    options = dict(TINY_FASTTEXT_OPTIONS, epoch=2, minn=3)
    return train_fasttext(corpus, directory / "other.bin", **options)


def test_a_different_fasttext_model_is_refused(base_archive, other_fasttext, tiny_fasttext_path):
    assert not same_fasttext_model(other_fasttext, tiny_fasttext_path)
    with pytest.raises(ConfigurationError, match=r"model\.vectors_path\) is not the one"):
        BilmFromArchive.from_archive(str(base_archive), vectors_path=str(other_fasttext))
    with pytest.raises(ConfigurationError, match="is not the one"):
        ArchiveFastTextIndexer(str(base_archive), vectors_path=str(other_fasttext))


def test_a_copy_of_the_archives_fasttext_model_is_accepted(
    base_archive, tiny_fasttext_path, tmp_path
):
    copy = Path(shutil.copy(tiny_fasttext_path, tmp_path / "copy.bin"))
    assert same_fasttext_model(copy, tiny_fasttext_path)
    model = BilmFromArchive.from_archive(str(base_archive), vectors_path=str(copy))
    assert model._text_field_embedder._token_embedders["fasttext"].vectors.path == copy
    indexer = ArchiveFastTextIndexer(str(base_archive), vectors_path=str(copy))
    assert indexer.vectors.path == copy


def test_a_reader_with_another_fasttext_model_is_refused_before_training(
    base_archive, other_fasttext, tmp_path, monkeypatch
):
    swapped = {"dataset_reader.token_indexers.fasttext": {
        "type": "elmoc_fasttext_subwords", "vectors_path": str(other_fasttext)
    }}
    with pytest.raises(
        ConfigurationError, match=r"dataset_reader\.token_indexers\.fasttext\.vectors_path"
    ):
        finetune(base_archive, tmp_path / "run", monkeypatch, swapped)
    assert not list((tmp_path / "run").glob("model_state_*"))
