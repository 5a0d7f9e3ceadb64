"""
The parameters an archive's config implies are bounded before anything is built
(`parameter_bound.py`, issue #35): the bound names the config key and `ELMOC_ARCHIVE_MAX_PARAMETERS`,
holds for a carried biLM's config too, and is no more than the tiny archive's weights hold.
"""

import json
from pathlib import Path

import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import extract_archive
from tests.bad_input.conftest import write_archive
from tests.common.archives.conftest import _config, _load, _member, _with_model


def test_layer_counts_past_the_parameter_limit_are_refused_before_building(elmoc_archive, tmp_path):
    path = _with_model(
        elmoc_archive,
        tmp_path,
        "layers",
        lambda c: c["model"]["contextualizer"].update(num_layers=1_000_000_000),
    )
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "model.contextualizer.num_layers" in str(raised.value)
    assert "ELMOC_ARCHIVE_MAX_PARAMETERS" in str(raised.value)


def test_a_cell_dim_its_weights_do_not_hold_is_refused_before_building(elmoc_archive, tmp_path):
    path = _with_model(
        elmoc_archive,
        tmp_path,
        "cell",
        lambda c: c["model"]["contextualizer"].update(cell_dim=1_000_000),
    )
    with pytest.raises(ConfigurationError) as raised:
        _load(path)
    assert "config.json: model.contextualizer.cell_dim" in str(raised.value)


def test_a_carried_biLM_config_is_bounded_too(elmoc_archive, tmp_path, extraction):
    carried = _config(elmoc_archive)
    carried["model"]["contextualizer"]["num_layers"] = 1_000_000_000
    member = "elmoc_bilm/0123456789abcdef/config.json"
    path = write_archive(
        elmoc_archive, tmp_path / "carried.tar.gz", [_member(member, json.dumps(carried).encode())]
    )
    with pytest.raises(ConfigurationError) as raised:
        extract_archive(path, extraction)
    assert member in str(raised.value)
    assert "ELMOC_ARCHIVE_MAX_PARAMETERS" in str(raised.value)
    assert not extraction.exists()


def test_the_tiny_archives_bound_holds_for_its_own_config(elmoc_archive, extraction):
    from elmoc_allennlp.common.archives import (
        check_weights_file,
        config_parameter_bound,
        read_config,
    )

    directory = extract_archive(elmoc_archive, extraction)
    held = check_weights_file(Path(directory) / "weights.th", "tiny", "weights.th")
    state = torch.load(Path(directory) / "weights.th")
    assert held == sum(value.numel() for value in state.values())
    bound, _ = config_parameter_bound(read_config(directory, "tiny")["model"])
    assert 0 < bound <= held


def _sized_reader(input_dim: int, hidden_dim: int, num_layers: int):
    def edit(config):
        config["dataset_reader"]["encoder"] = {
            "input_dim": input_dim,
            "hidden_dim": hidden_dim,
            "num_layers": num_layers,
        }

    return edit


def test_a_readers_sizes_are_bounded_by_the_limit_not_by_the_weights(
    elmoc_archive, tmp_path, extraction
):
    """A reader holds no weights: its sizes (10^6 parameters here, far more than the tiny archive's
    weights hold) count against `ELMOC_ARCHIVE_MAX_PARAMETERS` only, so such an archive extracts."""
    path = _with_model(elmoc_archive, tmp_path, "reader-sizes", _sized_reader(1000, 1000, 1))
    extract_archive(path, extraction)
    assert (extraction / "config.json").is_file()


@pytest.mark.parametrize("section", ["dataset_reader", "validation_dataset_reader", "data_loader"])
def test_a_built_section_past_the_parameter_limit_is_refused(
    section, elmoc_archive, tmp_path, extraction
):
    def edit(config):
        config[section] = dict(config.get(section) or {"type": "elmoc_lm_corpus"})
        config[section]["layers"] = {"input_dim": 10**6, "hidden_dim": 10**6, "num_layers": 10**9}

    path = _with_model(elmoc_archive, tmp_path, section, edit)
    with pytest.raises(ConfigurationError) as raised:
        extract_archive(path, extraction)
    assert f"{section}.layers.num_layers" in str(raised.value)
    assert "ELMOC_ARCHIVE_MAX_PARAMETERS" in str(raised.value) and str(path) in str(raised.value)
    assert not extraction.exists()


def test_the_sections_are_bounded_together(elmoc_archive, tmp_path, extraction, monkeypatch):
    """Two readers each under the limit, together past it (both are built)."""

    def edit(config):
        _sized_reader(1000, 1000, 1)(config)
        config["validation_dataset_reader"] = json.loads(json.dumps(config["dataset_reader"]))

    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_PARAMETERS", "1500000")
    path = _with_model(elmoc_archive, tmp_path, "together", edit)
    with pytest.raises(ConfigurationError, match="ELMOC_ARCHIVE_MAX_PARAMETERS"):
        extract_archive(path, extraction)
