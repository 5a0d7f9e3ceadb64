"""`elmoc_corpus`: allennlp's multi-process loader whose length comes from the corpus index."""

import copy
import json
import logging
import re
import sys
from pathlib import Path

import pytest

from allennlp.commands.train import train_model_from_file
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import DataLoader, Vocabulary
from allennlp.data.dataset_readers.dataset_reader import DistributedInfo

from elmoc_allennlp.data.dataset_readers.lm_corpus_reader import LanguageModelCorpusReader
from tests.conftest import FIXTURES_ROOT, LM_CORPUS


def _corpus(tmp_path: Path) -> Path:
    directory = tmp_path / "corpus"
    directory.mkdir()
    number = 0
    for shard, size in enumerate([37, 5, 61, 0, 23]):
        lines = []
        for i in range(size):
            lines.append(
                "" if i % 9 == 4 else " ".join(f"s{number}w{k}" for k in range(1 + i % 13))
            )
            number += 1
        (directory / f"part-{shard}.txt").write_text("\n".join(lines) + "\n")
    return directory


def _loader(reader, corpus, **options) -> DataLoader:
    loader = DataLoader.from_params(
        Params(copy.deepcopy({"type": "elmoc_corpus", **options})),
        reader=reader,
        data_path=str(corpus),
    )
    loader.index_with(Vocabulary())
    return loader


LOADERS = [
    {"batch_size": 4},
    {"batch_size": 4, "drop_last": True},
    {"batch_size": 5, "shuffle": True, "max_instances_in_memory": 8},
    {
        "batch_sampler": {"type": "bucket", "batch_size": 3, "sorting_keys": ["tokens"]},
        "max_instances_in_memory": 7,
    },
    {
        "batch_sampler": {"type": "bucket", "batch_size": 4, "sorting_keys": ["tokens"]},
        "num_workers": 2,
    },
    {
        "batch_sampler": {
            "type": "bucket",
            "batch_size": 4,
            "sorting_keys": ["tokens"],
            "drop_last": True,
        },
        "max_instances_in_memory": 9,
        "num_workers": 2,
    },
]


@pytest.mark.parametrize(
    "options", LOADERS, ids=lambda options: json.dumps(options, sort_keys=True)
)
@pytest.mark.parametrize("world_size", [1, 2])
def test_length_is_the_number_of_batches_produced(tmp_path, options, world_size):
    corpus = _corpus(tmp_path)
    seen = 0
    for rank in range(world_size):
        reader = LanguageModelCorpusReader(mode="sentence", max_sequence_length=5, shuffle=True)
        reader.set_epoch(1)
        if world_size > 1:
            reader._set_distributed_info(DistributedInfo(world_size, rank))
        loader = _loader(reader, corpus, **options)
        batches = iter(loader)
        length = len(loader)
        assert len(batches) == length  # what tqdm shows as the total (`allennlp evaluate`)
        produced = list(batches)
        assert len(produced) == length
        seen += sum(len(batch["tokens"]["tokens"]["tokens"]) for batch in produced)
    if not options.get("drop_last") and not options.get("batch_sampler", {}).get("drop_last"):
        assert seen == LanguageModelCorpusReader(max_sequence_length=5).num_instances(str(corpus))


def test_a_sampler_that_needs_the_instances_falls_back_to_allennlp(tmp_path):
    corpus = _corpus(tmp_path)
    loader = _loader(
        LanguageModelCorpusReader(),
        corpus,
        max_instances_in_memory=10,
        batch_sampler={"type": "max_tokens_sampler", "max_tokens": 40},
    )
    with pytest.raises(TypeError):
        len(loader)
    assert len(list(iter(loader))) > 0


def test_training_and_validation_bars_show_a_total(tmp_path, capfd):
    overrides = json.dumps({"trainer.num_epochs": 1})
    train_model_from_file(
        str(FIXTURES_ROOT / "elmoc_tiny.jsonnet"), str(tmp_path / "run"), overrides=overrides
    )
    shown = capfd.readouterr().err
    # 35 training sentences in batches of 8, 4 validation sentences: N/M bars, with an ETA.
    assert re.search(r"\b5/5 \[\d\d:\d\d<00:00", shown), shown[-2000:]
    assert re.search(r"\b1/1 \[\d\d:\d\d<00:00", shown), shown[-2000:]
    assert not re.search(r"\b5it \[", shown)


def _evaluate_in_process(monkeypatch, cwd: Path, *arguments: str) -> None:
    """`allennlp evaluate ARGUMENTS` through allennlp's `main`, in this process, from `cwd`."""
    from allennlp.commands import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(
        sys, "argv", ["allennlp", "evaluate", *arguments, "--include-package", "elmoc_allennlp"]
    )
    for name in (
        "allennlp.common.params",
        "allennlp.nn.initializers",
        "allennlp.modules.token_embedders.embedding",
    ):
        logger = logging.getLogger(name)  # the command turns these off or down: put back afterwards
        monkeypatch.setattr(logger, "disabled", logger.disabled)
        monkeypatch.setattr(logger, "level", logger.level)
    main(prog="allennlp")


def test_evaluate_shows_a_total_and_refuses_a_path_matching_nothing(
    elmoc_archive, tmp_path, monkeypatch, capfd
):
    _evaluate_in_process(monkeypatch, tmp_path, str(elmoc_archive), str(LM_CORPUS / "train-*"))
    shown = capfd.readouterr().err
    assert re.search(r"\b5/5 \[", shown), shown[-3000:]
    # `allennlp evaluate ARCHIVE "$VALIDATION_DATA/valid.txt"` with the variable unset.
    with pytest.raises(
        ConfigurationError, match=re.escape("No corpus files found matching '/valid.txt'")
    ):
        _evaluate_in_process(monkeypatch, tmp_path, str(elmoc_archive), "/valid.txt")


def _one_token_lines(tmp_path: Path, num_lines: int) -> Path:
    corpus = tmp_path / f"lines-{num_lines}.txt"
    corpus.write_text("".join(f"w{number}\n" for number in range(num_lines)))
    return corpus


# The batch size and `max_instances_in_memory` cut the epoch: shares of k*B - 1, k*B and k*B + 1
# instances for k = 1, 2, batch size 4 and 6 instances in memory (one process of one worker; and,
# loader workers being processes, a few on 2 ranks x 2 workers); len() is the number of batches,
# the batches hold every instance once.
_CUT_BY = [
    {"batch_size": 4, "max_instances_in_memory": 6},
    {"batch_size": 4, "max_instances_in_memory": 6, "drop_last": True},
    {
        "batch_sampler": {"type": "bucket", "batch_size": 4, "sorting_keys": ["tokens"]},
        "max_instances_in_memory": 6,
    },
    {
        "batch_sampler": {
            "type": "bucket",
            "batch_size": 4,
            "sorting_keys": ["tokens"],
            "drop_last": True,
        },
        "max_instances_in_memory": 6,
    },
]
_AT_MULTIPLES = [
    (per_share, options, 1, 1)
    for per_share in (3, 4, 5, 5, 6, 7, 7, 8, 9, 11, 12, 13)
    for options in _CUT_BY
]
_AT_MULTIPLES += [
    (per_share, _CUT_BY[index], 2, 2) for per_share, index in ((5, 0), (6, 3), (8, 1), (13, 2))
]


@pytest.mark.parametrize(
    "per_share, options, world_size, num_workers",
    sorted(
        set(
            (per_share, json.dumps(options), world_size, num_workers)
            for per_share, options, world_size, num_workers in _AT_MULTIPLES
        )
    ),
)
def test_length_at_multiples_of_the_batch_and_the_instances_in_memory(
    tmp_path, per_share, options, world_size, num_workers
):
    options = json.loads(options)
    corpus = _one_token_lines(tmp_path, per_share * world_size * num_workers)
    vocabulary = Vocabulary()
    vocabulary.add_tokens_to_namespace(
        [f"w{number}" for number in range(per_share * world_size * num_workers)]
    )
    seen = []
    for rank in range(world_size):
        reader = LanguageModelCorpusReader()
        if world_size > 1:
            reader._set_distributed_info(DistributedInfo(world_size, rank))
        loader = _loader(
            reader, corpus, num_workers=num_workers if num_workers > 1 else 0, **options
        )
        loader.index_with(vocabulary)
        assert reader.share_sizes(str(corpus), num_workers) == [per_share] * num_workers
        batches = list(loader)
        assert len(batches) == len(loader)
        for batch in batches:
            seen.extend(batch["tokens"]["tokens"]["tokens"][:, 1].tolist())
    drop_last = options.get("drop_last") or options.get("batch_sampler", {}).get("drop_last")
    assert len(seen) == len(set(seen))
    if not drop_last:
        assert len(seen) == per_share * world_size * num_workers


@pytest.mark.parametrize("error", [+1, -1])
def test_an_epoch_of_another_number_of_batches_raises(tmp_path, monkeypatch, error):
    from elmoc_allennlp.data.dataset_readers.corpus_shares import EpochLengthError

    corpus = _one_token_lines(tmp_path, 10)
    reader = LanguageModelCorpusReader()
    reader._set_distributed_info(DistributedInfo(2, 1))
    loader = _loader(reader, corpus, batch_size=1, max_instances_in_memory=4)
    assert len(list(loader)) == len(loader) == 5
    # The reader's count of its share is off by one (its own check of the read not at fault).
    share_sizes = reader.share_sizes
    monkeypatch.setattr(
        reader, "share_sizes", lambda *args: [size + error for size in share_sizes(*args)]
    )
    batches = iter(loader)
    assert len(batches) == 5 + error
    what = "ended after 5" if error > 0 else "went on past"
    expected = rf"{re.escape(str(corpus))} on rank 1 of 2 {what} .* len\(\) is {5 + error}"
    with pytest.raises(EpochLengthError, match=expected):
        list(batches)
