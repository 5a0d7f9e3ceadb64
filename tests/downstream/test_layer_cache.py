"""
The layer cache of a frozen biLM (`cache_directory`, issue #36): a cached run equals a live one,
a cache is only read for the biLM that made it, and a damaged or foreign cache is refused.
"""

import json
import logging
import multiprocessing
import random
import shutil

import numpy
import pytest
import torch

from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import import_module_and_submodules
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor
from allennlp.training.util import evaluate
from allennlp.data.data_loaders import SimpleDataLoader

from elmoc_allennlp.downstream.layer_cache import (
    CACHE_DTYPES,
    LayerCache,
    LayerStore,
    bilm_fingerprint,
)
from elmoc_allennlp.downstream.elmoc import ElmocElmo
from tests.crash_safety import wait_for_child
from tests.downstream.conftest import DOWNSTREAM_CONFIGS

WORDS = (
    "U.N. official Ekeus heads for Baghdad . AI2 engineer Joel lives in Seattle Paris talks".split()
)
TAGS = [
    "I-ORG",
    "O",
    "I-PER",
    "O",
    "O",
    "I-LOC",
    "O",
    "I-ORG",
    "O",
    "I-PER",
    "O",
    "O",
    "I-LOC",
    "I-LOC",
    "O",
]


@pytest.fixture(scope="module", autouse=True)
def registered():
    import_module_and_submodules("allennlp_models")
    import_module_and_submodules("elmoc_allennlp")


def _sentences(count: int, seed: int):
    generator = random.Random(seed)
    return [generator.sample(range(len(WORDS)), generator.randint(2, 9)) for _ in range(count)]


def _conll_file(path, count: int, seed: int):
    lines = []
    for sentence in _sentences(count, seed):
        lines += ["-DOCSTART- -X- -X- O", ""]
        lines += [f"{WORDS[i]}\tNNP\tI-NP\t{TAGS[i]}" for i in sentence] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _elmo(archive, **kwargs) -> ElmocElmo:
    elmo = ElmocElmo(str(archive), num_output_representations=1, dropout=0.0, **kwargs)
    elmo.eval()
    return elmo


def _batch(elmo: ElmocElmo, sentences):
    """The biLM's input ids of `sentences` (lists of words), padded."""
    indexer = elmo.bilm.indexer
    rows = [indexer.token_ids(word) if hasattr(indexer, "token_ids") else None for word in WORDS]
    width = max(len(row) for row in rows)
    batch = torch.zeros(len(sentences), max(len(s) for s in sentences), width, dtype=torch.long)
    for index, sentence in enumerate(sentences):
        for position, word in enumerate(sentence):
            batch[index, position, : len(rows[word])] = torch.tensor(rows[word])
    return batch


def _layers(elmo: ElmocElmo, batch):
    output = elmo.bilm(batch)
    return torch.stack(output["activations"]), output["mask"]


# ---------------------------------------------------------------- exactness through allennlp train


@pytest.mark.parametrize("cache_dtype", ["float32"])
def test_cached_and_live_training_give_the_same_losses_and_metrics(
    cache_dtype, downstream_environment, monkeypatch, tmp_path
):
    monkeypatch.setenv("NER_TRAIN_DATA_PATH", str(_conll_file(tmp_path / "train.txt", 24, 0)))
    monkeypatch.setenv("NER_VALIDATION_DATA_PATH", str(_conll_file(tmp_path / "dev.txt", 8, 1)))
    monkeypatch.setenv("NER_TEST_DATA_PATH", str(tmp_path / "dev.txt"))
    cache_directory = tmp_path / "cache"
    small = {
        "trainer.num_epochs": 3,
        "data_loader.batch_size": 5,
        "data_loader.shuffle": True,
        "model.encoder.hidden_size": 8,
        "model.encoder.num_layers": 1,
        "model.text_field_embedder.token_embedders.elmo.dropout": 0.3,
    }
    runs = {}
    for name, extra in (
        ("live", {}),
        (
            "cached",
            {
                "model.text_field_embedder.token_embedders.elmo.cache_directory": str(
                    cache_directory
                ),
                "model.text_field_embedder.token_embedders.elmo.cache_dtype": cache_dtype,
            },
        ),
    ):
        serialization_dir = tmp_path / name
        train_model_from_file(
            str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
            str(serialization_dir),
            overrides=json.dumps({**small, **extra}),
        )
        runs[name] = [
            json.loads((serialization_dir / f"metrics_epoch_{epoch}.json").read_text())
            for epoch in range(3)
        ]
        runs[name].append(json.loads((serialization_dir / "metrics.json").read_text()))
    compared = 0
    for live, cached in zip(runs["live"], runs["cached"]):
        for key, value in live.items():
            if isinstance(value, float) and "duration" not in key and "time" not in key:
                assert cached[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
                compared += 1
    assert compared > 20
    assert runs["live"][-1]["training_loss"] != runs["live"][0]["training_loss"]  # it did train

    # One file, one entry per distinct sentence of train + dev, plus its record.
    files = list(cache_directory.glob("*.lmdb"))
    assert len(files) == 1
    distinct = {tuple(s) for s in _sentences(24, 0) + _sentences(8, 1)}
    assert len(LayerStore(files[0])) == len(distinct) + 1

    # The cached archive evaluates and predicts (reading the cache) as the live one does.
    evaluations, predictions = {}, {}
    for name in ("live", "cached"):
        archive = load_archive(str(tmp_path / name / "model.tar.gz"))
        reader = archive.dataset_reader
        instances = list(reader.read(str(tmp_path / "dev.txt")))
        loader = SimpleDataLoader(instances, batch_size=3)
        loader.index_with(archive.model.vocab)
        evaluations[name] = evaluate(archive.model, loader)
        if name == "cached":
            cache = next(
                m.layer_cache for m in archive.model.modules() if getattr(m, "layer_cache", None)
            )
            assert cache.hits == len(instances) and cache.misses == 0
        predictions[name] = Predictor(archive.model, reader).predict_batch_instance(instances)
    for key, value in evaluations["live"].items():
        assert evaluations["cached"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for live, cached in zip(predictions["live"], predictions["cached"]):
        assert cached["tags"] == live["tags"]
        logits = torch.tensor(cached["logits"]), torch.tensor(live["logits"])
        torch.testing.assert_close(*logits, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- module-level behaviour


def test_stored_layers_are_read_and_equal_live_ones_in_any_batch(elmoc_archive, tmp_path):
    live = _elmo(elmoc_archive)
    cached = _elmo(elmoc_archive, cache_directory=str(tmp_path / "cache"))
    sentences = _sentences(7, 3)
    first = _batch(live, sentences[:4])
    expected, expected_mask = _layers(live, first)
    filled, mask = _layers(cached, first)
    assert torch.equal(mask, expected_mask)
    torch.testing.assert_close(filled, expected, rtol=1e-5, atol=1e-6)
    assert (cached.bilm.layer_cache.hits, cached.bilm.layer_cache.misses) == (0, 4)

    # A batch of seen and new sentences, in another order and padding: the seen ones are read.
    mixed = [sentences[5], sentences[1], sentences[6], sentences[3]]
    batch = _batch(live, mixed)
    expected, expected_mask = _layers(live, batch)
    got, mask = _layers(cached, batch)
    assert torch.equal(mask, expected_mask)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert (cached.bilm.layer_cache.hits, cached.bilm.layer_cache.misses) == (2, 6)

    # Everything seen: the biLM does not run.
    cached.bilm.live_layers = None  # calling it would fail
    got, mask = _layers(cached, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    representation = cached(batch)["elmo_representations"][0]
    torch.testing.assert_close(
        representation, live(batch)["elmo_representations"][0], rtol=1e-5, atol=1e-6
    )


def test_float16_storage_rounds_the_layers_and_halves_the_disk(elmoc_archive, tmp_path):
    live = _elmo(elmoc_archive)
    sentences = _sentences(6, 4)
    batch = _batch(live, sentences)
    expected, _ = _layers(live, batch)
    sizes = {}
    for dtype in ("float32", "float16"):
        cached = _elmo(elmoc_archive, cache_directory=str(tmp_path / dtype), cache_dtype=dtype)
        _layers(cached, batch)
        got, _ = _layers(cached, batch)
        assert cached.bilm.layer_cache.hits == len(sentences)
        if dtype == "float16":
            torch.testing.assert_close(got, expected.half().float(), rtol=0, atol=0)
        else:
            assert torch.equal(got, expected)
        store = cached.bilm.layer_cache._store
        with store.lmdb_env.begin() as transaction:
            sizes[dtype] = sum(
                len(value) for key, value in transaction.cursor() if not key.startswith(b"__")
            )
    values = sum(len(s) + 2 for s in sentences) * expected.size(0) * expected.size(-1)
    assert sizes["float32"] - 4 * values == sizes["float16"] - 2 * values  # same headers


def test_cache_dtype_typo_is_an_error_with_the_nearest_name(elmoc_archive, tmp_path):
    with pytest.raises(
        ConfigurationError, match=r"cache_dtype .* 'float61' \(did you mean 'float16'\?\)"
    ):
        _elmo(elmoc_archive, cache_directory=str(tmp_path), cache_dtype="float61")


def test_another_biLMs_cache_is_never_read(elmoc_archive, tmp_path):
    cache_directory = tmp_path / "cache"
    original = _elmo(elmoc_archive, cache_directory=str(cache_directory))
    batch = _batch(original, _sentences(5, 5))
    stored, _ = _layers(original, batch)

    # The same archive with one weight changed: another fingerprint, another file, live layers.
    # One row of the input projection: a shift of every row alike is undone by the LayerNorm after it,
    # leaving only rounding (which allclose may or may not see, depending on the BLAS threads).
    changed_live = _elmo(elmoc_archive)
    changed = _elmo(elmoc_archive, cache_directory=str(cache_directory))
    for elmo in (changed_live, changed):
        with torch.no_grad():
            next(elmo.bilm.bilm.contextualizer.parameters())[0].add_(0.25)
    expected, _ = _layers(changed_live, batch)
    got, _ = _layers(changed, batch)
    assert not torch.allclose(expected, stored)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert changed.bilm.layer_cache.misses == len(batch)
    assert changed.bilm.layer_cache.path != original.bilm.layer_cache.path
    assert len(list(cache_directory.glob("*.lmdb"))) == 2

    # The first biLM's file under the second one's name is refused, naming it.
    third = _elmo(elmoc_archive, cache_directory=str(tmp_path / "renamed"))
    with torch.no_grad():
        next(third.bilm.bilm.contextualizer.parameters())[0].add_(0.25)
    (tmp_path / "renamed").mkdir()
    (tmp_path / "renamed" / changed.bilm.layer_cache.path.name).write_bytes(
        original.bilm.layer_cache.path.read_bytes()
    )
    with pytest.raises(ConfigurationError, match=r"Layer cache .*renamed.* another biLM"):
        _layers(third, batch)


def test_the_fingerprint_is_the_same_with_the_fasttext_model_elsewhere(
    elmoc_archive, tiny_fasttext_path, tmp_path
):
    # The state dict carries the vectors record (the fastText path inside); the fingerprint
    # hashes the weights and the model's fingerprint instead, so a copy of the file reads the cache.
    copy = shutil.copy(tiny_fasttext_path, tmp_path / "elsewhere.bin")
    here = _elmo(elmoc_archive).bilm
    elsewhere = _elmo(elmoc_archive, vectors_path=str(copy)).bilm
    assert any(name.endswith("vectors_record") for name in elsewhere.bilm.state_dict())
    assert bilm_fingerprint(elsewhere) == bilm_fingerprint(here)
    with torch.no_grad():
        next(elsewhere.bilm.contextualizer.parameters()).add_(0.25)
    assert bilm_fingerprint(elsewhere) != bilm_fingerprint(here)


def test_damaged_cache_file_is_refused_naming_it(elmoc_archive, tmp_path):
    elmo = _elmo(elmoc_archive, cache_directory=str(tmp_path / "cache"))
    batch = _batch(elmo, _sentences(3, 6))
    _layers(elmo, batch)
    path = elmo.bilm.layer_cache.path
    # One value's bytes changed (as a bad disk or an attacker would): its checksum fails.
    environment = elmo.bilm.layer_cache._store.lmdb_env  # one handle per file and process
    with environment.begin(write=True) as txn:
        key, value = next((k, v) for k, v in txn.cursor() if not k.startswith(b"__"))
        damaged = bytearray(value)
        damaged[-3] ^= 0xFF
        txn.put(key, bytes(damaged))
    reader = _elmo(elmoc_archive, cache_directory=str(tmp_path / "cache"))
    message = rf"Layer cache {path} is damaged: entry {key.decode()} fails its checksum"
    with pytest.raises(ConfigurationError, match=message):
        _layers(reader, batch)

    # A value with a forged shape is refused before any bytes are used.
    with environment.begin(write=True) as txn:
        forged = bytearray(value)
        forged[13:17] = (10**6).to_bytes(4, "little")
        txn.put(key, bytes(forged))
    reader = _elmo(elmoc_archive, cache_directory=str(tmp_path / "cache"))
    with pytest.raises(ConfigurationError, match=r"is damaged: entry .* has shape"):
        _layers(reader, batch)

    # Not an LMDB file at all.
    other = tmp_path / "other"
    other.mkdir()
    (other / path.name).write_bytes(b"\x80\x04not a cache" * 100)
    reader = _elmo(elmoc_archive, cache_directory=str(other))
    with pytest.raises(
        ConfigurationError, match=rf"Layer cache {other / path.name} cannot be opened"
    ):
        _layers(reader, batch)


def test_a_fine_tuned_or_training_biLM_is_refused(elmoc_archive, tmp_path):
    with pytest.raises(ConfigurationError, match="cache_directory .* requires_grad is true"):
        _elmo(elmoc_archive, requires_grad=True, cache_directory=str(tmp_path))
    elmo = _elmo(elmoc_archive, cache_directory=str(tmp_path))
    batch = _batch(elmo, _sentences(2, 7))
    next(elmo.bilm.bilm.parameters()).requires_grad_(True)  # unfrozen later, e.g. by a callback
    with pytest.raises(ConfigurationError, match="fine-tuned"):
        _layers(elmo, batch)
    next(elmo.bilm.bilm.parameters()).requires_grad_(False)
    elmo.bilm.bilm.train()
    with pytest.raises(ConfigurationError, match="training mode"):
        _layers(elmo, batch)


def test_a_full_cache_stops_filling_with_one_warning_and_goes_on_live(
    elmoc_archive, tmp_path, caplog
):
    live = _elmo(elmoc_archive)
    elmo = _elmo(elmoc_archive)
    elmo.bilm.layer_cache = LayerCache(tmp_path, map_size=40 * 4096)  # a few pages
    with caplog.at_level(logging.WARNING):
        for seed in range(8):
            batch = _batch(live, _sentences(6, 100 + seed) * 3)
            got, _ = _layers(elmo, batch)
            torch.testing.assert_close(got, _layers(live, batch)[0], rtol=1e-5, atol=1e-6)
    warnings = [r for r in caplog.records if "stops filling" in r.getMessage()]
    assert len(warnings) == 1 and not elmo.bilm.layer_cache.filling


def _fill(archive, directory, seed, queue):
    torch.set_num_threads(1)
    import_module_and_submodules("elmoc_allennlp")
    elmo = _elmo(archive, cache_directory=directory)
    sentences = _sentences(12, seed)
    for start in range(0, len(sentences), 2):
        _layers(elmo, _batch(elmo, sentences[start : start + 2]))
    queue.put(elmo.bilm.layer_cache.misses)


def test_processes_filling_one_cache_do_not_corrupt_it(elmoc_archive, tmp_path):
    """
    Two processes filling one layer cache at once leave it reading back as the live biLM's layers.

    Two processes (forked by the forkserver of `tests/fresh_process.py`, which has imported torch),
    each importing allennlp and the plugin and loading the biLM archive: concurrent writers to the
    cache can only be separate processes.
    """
    directory = str(tmp_path / "cache")
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue()
    workers = [
        context.Process(target=_fill, args=(str(elmoc_archive), directory, 8, queue))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:  # however long a busy machine takes; a hang still fails
        wait_for_child(
            worker.pid, lambda: worker.exitcode is not None, "a worker filling the cache"
        )
        assert worker.exitcode == 0
    assert all(0 <= queue.get(timeout=5) <= 12 for _ in workers)
    live = _elmo(elmoc_archive)
    reader = _elmo(elmoc_archive, cache_directory=directory)
    reader.bilm.live_layers = None  # everything must be read
    sentences = _sentences(12, 8)
    batch = _batch(live, sentences)
    torch.testing.assert_close(
        _layers(reader, batch)[0], _layers(live, batch)[0], rtol=1e-5, atol=1e-6
    )


# ---------------------------------------------------------------- values at LMDB's page boundaries


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["value_below", "at", "value_above"])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_values_filling_whole_pages_round_trip(tmp_path, k, offset, cache_dtype):
    # LMDB keeps a value that does not fit in its page on overflow pages: values whose stored
    # size (header + payload) is a value short of, at the last value within, or a value past k
    # pages must read back as written, alone and beside others in one transaction.
    from elmoc_allennlp.downstream.layer_cache import _HEADER, _NUMPY_DTYPES

    store = LayerStore(tmp_path / "cache.lmdb", map_size=1 << 24)
    store.cache_dtype = cache_dtype
    page = store.lmdb_env.stat()["psize"]
    itemsize = _NUMPY_DTYPES[cache_dtype].itemsize
    values = (k * page - _HEADER.size) // itemsize + offset
    generator = torch.Generator().manual_seed(k)
    items = {}
    for index, timesteps in enumerate([values, values - 1, 3, values + 1]):
        items[f"key{index}".encode()] = torch.randn(1, timesteps, 1, generator=generator)
    encoded = {key: store.encode(value) for key, value in items.items()}
    assert len(encoded[b"key0"]) == _HEADER.size + values * itemsize
    assert k * page - itemsize < _HEADER.size + (values - offset) * itemsize <= k * page
    store.write_many(encoded)
    keys = list(items)
    lengths = [value.size(1) - 2 for value in items.values()]
    read = numpy.zeros((1, len(keys), max(lengths) + 2, 1), dtype=numpy.float32)
    assert store.read_into(keys, lengths, read) == []
    for row, (key, value) in enumerate(items.items()):
        expected = value.to(CACHE_DTYPES[cache_dtype]).float().numpy()
        numpy.testing.assert_array_equal(read[:, row, : value.size(1)], expected)
        numpy.testing.assert_array_equal(read[:, row, value.size(1) :], 0.0)
        numpy.testing.assert_array_equal(store[key.decode()].numpy(), expected)


def test_a_relative_cache_directory_is_resolved_when_training_and_evaluate_says_where(
    downstream_environment, monkeypatch, tmp_path
):
    """Issue #48: evaluated from another folder, an archive trained with `runs/layer_cache` wrote a
    new cache there."""
    monkeypatch.setenv("NER_TRAIN_DATA_PATH", str(_conll_file(tmp_path / "train.txt", 12, 0)))
    monkeypatch.setenv("NER_VALIDATION_DATA_PATH", str(_conll_file(tmp_path / "dev.txt", 4, 1)))
    monkeypatch.setenv("NER_TEST_DATA_PATH", str(tmp_path / "dev.txt"))
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    overrides = {
        "trainer.num_epochs": 1,
        "evaluate_on_test": False,
        "model.encoder.hidden_size": 4,
        "model.encoder.num_layers": 1,
        "model.text_field_embedder.token_embedders.elmo.cache_directory": "runs/layer_cache",
    }
    train_model_from_file(
        str(DOWNSTREAM_CONFIGS / "ner_crf_tagger.jsonnet"),
        "runs/ner",
        overrides=json.dumps(overrides),
    )
    cache_directory = tmp_path / "work" / "runs" / "layer_cache"
    recorded = json.loads((tmp_path / "work" / "runs" / "ner" / "config.json").read_text())
    assert recorded["model"]["text_field_embedder"]["token_embedders"]["elmo"][
        "cache_directory"
    ] == str(cache_directory)
    assert len(list(cache_directory.glob("*.lmdb"))) == 1

    monkeypatch.chdir(tmp_path / "elsewhere")
    archive = load_archive(str(tmp_path / "work" / "runs" / "ner" / "model.tar.gz"))
    instances = list(archive.dataset_reader.read(str(tmp_path / "dev.txt")))
    loader = SimpleDataLoader(instances, batch_size=4)
    loader.index_with(archive.model.vocab)
    # allennlp's training replaced the root logger's handlers (caplog's among them): a handler of our own.
    messages = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    cache_logger = logging.getLogger("elmoc_allennlp.downstream.layer_cache")
    cache_logger.addHandler(handler)
    monkeypatch.setattr(cache_logger, "level", logging.INFO)
    try:
        evaluate(archive.model, loader)
    finally:
        cache_logger.removeHandler(handler)
    assert list((tmp_path / "elsewhere").iterdir()) == []  # no cache written here
    cache = next(m.layer_cache for m in archive.model.modules() if getattr(m, "layer_cache", None))
    assert cache.hits == len(instances) and cache.misses == 0
    assert (
        f"Layer cache of the biLM's layers (float32): {cache.path}, 16 sentences stored, read and filled"
        in messages
    )
    assert str(cache.path).startswith(str(cache_directory))


def test_a_relative_cache_directory_outside_training_warns_where_it_goes(
    elmoc_archive, tmp_path, monkeypatch, caplog
):
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="elmoc_allennlp.downstream.layer_cache"):
        elmo = _elmo(elmoc_archive, cache_directory="layer_cache")
    assert elmo.bilm.layer_cache.directory == tmp_path / "layer_cache"
    assert (
        f"cache_directory layer_cache is relative: the biLM's layers are read and stored in {tmp_path}"
        in caplog.text
    )


def test_resolve_cache_directories_only_touches_relative_biLM_blocks():
    from elmoc_allennlp.downstream.layer_cache import resolve_cache_directories
    import os

    config = {
        "model": {
            "elmo": {"archive_file": "a.tar.gz", "cache_directory": "cache"},
            "other": {"archive_file": "b.tar.gz", "cache_directory": "/abs/cache"},
            "list": [
                {"archive_file": "c.tar.gz", "cache_directory": "~/cache"},
                {"cache_directory": "no_bilm"},
            ],
        }
    }
    assert resolve_cache_directories(config) == [os.path.abspath("cache")]
    assert config["model"]["elmo"]["cache_directory"] == os.path.abspath("cache")
    assert config["model"]["other"]["cache_directory"] == "/abs/cache"
    assert (
        config["model"]["list"][0]["cache_directory"] == "~/cache"
    )  # expanded to a home path: absolute
    assert config["model"]["list"][1]["cache_directory"] == "no_bilm"
