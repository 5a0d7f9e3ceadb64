"""
Options of the blocks ELMo-C replaces (`elmo_token_embedder`, `bidirectional_lm_token_embedder`,
`bcn`'s `elmo`): accepted where they mean something for a biLM, else a precise error.
"""
import pytest
import torch

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.elmo import Elmo
from allennlp.modules.token_embedders import TokenEmbedder

from elmoc_allennlp.downstream.elmoc import ElmocElmo
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.token_embedder import ElmocTokenEmbedder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EMBEDDERS = "model.text_field_embedder.token_embedders.elmo."


def embedder_params(archive, **options) -> Params:
    return Params({"type": "elmoc_token_embedder", "archive_file": str(archive), **options},
                  history=EMBEDDERS)


@pytest.mark.parametrize("keys", [["options_file", "weight_file"], ["weight_file"]])
def test_elmo_files_left_in_the_block_say_what_to_change(elmoc_archive, keys):
    params = embedder_params(elmoc_archive, **{key: "elmo.file" for key in keys})
    with pytest.raises(ConfigurationError) as error:
        TokenEmbedder.from_params(params)
    message = str(error.value)
    assert "ELMo-C takes archive_file; remove options_file and weight_file" in message
    for key in keys:
        assert EMBEDDERS + key in message


def test_vocab_to_cache_has_no_elmoc_meaning_but_null_is_accepted(elmoc_archive):
    with pytest.raises(ConfigurationError, match=r"elmo\.vocab_to_cache: ELMo-C has no word cache"):
        TokenEmbedder.from_params(embedder_params(elmoc_archive, vocab_to_cache=["the"]))
    embedder = TokenEmbedder.from_params(embedder_params(elmoc_archive, vocab_to_cache=None))
    assert isinstance(embedder, ElmocTokenEmbedder)


def test_bidirectional_lm_token_embedder_options_are_accepted(elmoc_archive):
    # The options of allennlp-models' constituency_parser_transformer_elmo block.
    options = {"dropout": 0.0, "bos_eos_tokens": ["<S>", "</S>"], "remove_bos_eos": True,
               "requires_grad": False}
    embedder = TokenEmbedder.from_params(embedder_params(elmoc_archive, **options))
    kept = TokenEmbedder.from_params(
        embedder_params(elmoc_archive, **{**options, "remove_bos_eos": False})
    )
    kept.load_state_dict(embedder.state_dict())
    indexer = embedder.elmo.bilm.indexer
    subword_ids = indexed_batch(indexer, [["the", "cat", "sat"]])
    embedder.eval()
    kept.eval()
    with torch.no_grad():
        without = embedder(subword_ids)
        with_boundaries = kept(subword_ids)
    assert without.shape == (1, 3, 12)
    assert with_boundaries.shape == (1, 5, 12)  # <S> the cat sat </S>
    assert torch.allclose(with_boundaries[:, 1:4], without, atol=1e-6)


def test_other_boundary_tokens_are_refused_naming_the_biLMs(elmoc_archive):
    params = embedder_params(elmoc_archive, bos_eos_tokens=["<s>", "</s>"])
    with pytest.raises(ConfigurationError) as error:
        TokenEmbedder.from_params(params)
    assert "pretrained with ['<S>', '</S>']" in str(error.value)
    assert "bos_eos_tokens is ['<s>', '</s>']" in str(error.value)


def test_an_elmo_block_with_archive_file_builds_elmoc(elmoc_archive):
    block = {"archive_file": str(elmoc_archive), "do_layer_norm": False, "dropout": 0.0,
             "num_output_representations": 2}
    elmo = Elmo.from_params(Params(dict(block)))
    assert isinstance(elmo, ElmocElmo)
    assert len(elmo._scalar_mixes) == 2 and elmo.get_output_dim() == 12
    with pytest.raises(ConfigurationError, match="remove options_file and weight_file"):
        Elmo.from_params(Params({**block, "options_file": "o.json", "weight_file": "w.hdf5"}))
    # Without archive_file it is allennlp's Elmo (which here fails looking for ELMo's files).
    with pytest.raises(FileNotFoundError, match="/nonexistent/o.json"):
        Elmo.from_params(Params({"options_file": "/nonexistent/o.json",
                                 "weight_file": "/nonexistent/w.hdf5",
                                 "num_output_representations": 1}))


def test_a_missing_biLM_archive_names_the_config_key_and_the_base(tmp_path, monkeypatch):
    from allennlp.data import TokenIndexer

    monkeypatch.chdir(tmp_path)
    missing = "runs/elmoc/model.tar.gz"
    blocks = [
        (TokenEmbedder, Params({"type": "elmoc_token_embedder", "archive_file": missing},
                               history=EMBEDDERS)),
        (TokenIndexer, Params({"type": "elmoc_bilm_inputs", "archive_file": missing},
                              history="validation_dataset_reader.token_indexers.elmo.")),
        (Elmo, Params({"archive_file": missing, "num_output_representations": 1},
                      history="model.elmo.")),
    ]
    for base, params in blocks:
        key = params.history + "archive_file"
        with pytest.raises(ConfigurationError) as error:
            base.from_params(params)
        message = str(error.value)
        assert f"ELMo-C archive {missing} ({key}) does not exist" in message
        assert f"working directory, {tmp_path}" in message
