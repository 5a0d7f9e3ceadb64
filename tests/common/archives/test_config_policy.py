"""
An archive's config (`config_policy.py`, issue #35): loading it reads nothing outside it (no URL,
no other archive, not itself), and JSON nested too deep or holding NaN or infinity is refused,
naming the archive, the member and the config key.
"""

import json
import re
import tarfile
from pathlib import Path

import pytest

from allennlp.common.checks import ConfigurationError

from tests.bad_input.conftest import write_archive
from tests.common.archives.conftest import _config, _load, _with_model


@pytest.mark.parametrize(
    "name, edit, keys",
    [
        # A downstream-like config whose biLM `archive_file` is a URL it does not carry.
        (
            "bilm-url",
            lambda c: c["model"]["text_field_embedder"]["token_embedders"]["fasttext"].update(
                archive_file="http://127.0.0.1:9/bilm.tar.gz"
            ),
            {"model.text_field_embedder.token_embedders.fasttext.archive_file"},
        ),
        (
            "from-archive-url",
            lambda c: c.update(
                model={"type": "from_archive", "archive_file": "http://127.0.0.1:9/m.tar.gz"}
            ),
            {"model.type", "model.archive_file"},
        ),
        (
            "finetune-from-archive",
            lambda c: c.update(
                model={"type": "elmoc_bilm_from_archive", "archive_file": "other.tar.gz"}
            ),
            {"model.type", "model.archive_file"},
        ),
        (
            "reader-url",
            lambda c: c["dataset_reader"].update(vocab_url="https://example.org/v"),
            {"dataset_reader.vocab_url"},
        ),
    ],
)
def test_an_archive_naming_a_url_or_another_archive_is_refused(
    elmoc_archive, tmp_path, name, edit, keys
):
    path = _with_model(elmoc_archive, tmp_path, name, edit)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert str(path) in str(raised.value)
    assert any(key + " " in str(raised.value) for key in keys), str(raised.value)


def test_urls_that_loading_never_reads_are_allowed(elmoc_archive, tmp_path):
    # As allennlp-models configs have them: data paths, a GloVe `pretrained_file` (dropped by
    # `load_archive` before building) and the vocabulary's (read from the archive's files).
    def edit(config):
        config["train_data_path"] = "https://example.org/train.txt"
        config["vocabulary"] = {"pretrained_files": {"tokens": "https://example.org/glove.txt.gz"}}
        embedder = config["model"]["text_field_embedder"]["token_embedders"]["fasttext"]
        embedder["pretrained_file"] = "https://example.org/glove.txt.gz"

    config = _config(elmoc_archive)
    edit(config)
    from elmoc_allennlp.common.archives import check_self_contained

    check_self_contained(config, tmp_path, "an archive")


def test_an_archive_opening_itself_is_refused_without_recursion(elmoc_archive, tmp_path):
    path = tmp_path / "self.tar.gz"
    config = _config(elmoc_archive)
    config["model"] = {"type": "from_archive", "archive_file": str(path)}
    write_archive(elmoc_archive, path, [], config=config)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert re.search(r"model\.(type|archive_file) ", str(raised.value))


def test_json_nested_600_deep_is_refused_naming_the_member(elmoc_archive, tmp_path):
    nested = "[" * 600 + "]" * 600
    config = json.dumps(_config(elmoc_archive))[:-1] + f', "deep": {nested}}}'
    path = write_archive(elmoc_archive, tmp_path / "deep.tar.gz", [], config=config.encode())
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "config.json" in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize(
    "value, written",
    [(float("inf"), "Infinity"), (float("-inf"), "-Infinity"), (float("nan"), "NaN")],
)
def test_nan_and_infinity_in_an_archived_config_are_refused_naming_the_key(
    elmoc_archive, tmp_path, value, written
):
    path = _with_model(
        elmoc_archive,
        tmp_path,
        f"config-{written}",
        lambda c: c["model"]["contextualizer"].update(cell_dim=value),
    )
    assert f'"cell_dim": {written}' in _raw_config(path)
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert f"{path} (config.json): model.contextualizer.cell_dim is {written}" in str(raised.value)


def _raw_config(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        return tar.extractfile("config.json").read().decode("utf-8")
