"""The Python API (`ElmocEmbedder`) and the `allennlp elmoc-embed` export command."""

import json
import os
from pathlib import Path

import h5py
import numpy
import pytest
import torch

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.commands.elmoc_embed import embed_file
from elmoc_allennlp.downstream.embedder import ElmocEmbedder
from tests.fresh_process import run_python

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHORT_LINES = ["the cat sat on the mat", "", "a dog", "unseenword zzqx the", "a dog"]
# Longer than the tiny biLM's pretraining sentences (200 tokens). The barely trained tiny biLM is
# chaotic on it (a 1e-6 change of the input changes the top layer by ~1), so its vectors are only
# compared between runs that batch it identically.
LINES = SHORT_LINES + [" ".join(["the", "cat"] * 120)]


@pytest.fixture(scope="module")
def embedder(elmoc_archive):
    return ElmocEmbedder(str(elmoc_archive))


@pytest.fixture
def sentences_file(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------- Python API


def test_embed_batch_layers_and_mixes(embedder):
    sentences = [line.split() for line in LINES]
    layers = embedder.embed_batch(sentences)
    assert embedder.num_layers == 3 and embedder.output_dim == 12
    assert [array.shape for array in layers] == [(3, len(s), 12) for s in sentences]
    assert all(array.dtype == numpy.float32 for array in layers)
    # Layer 0 is each direction's own projected input.
    assert not numpy.allclose(layers[0][0, :, :6], layers[0][0, :, 6:])
    top = embedder.embed_batch(sentences, output="top")
    average = embedder.embed_batch(sentences, output="average")
    mixed = embedder.embed_batch(sentences, output=[1.0, 0.0, -1.0])
    weights = torch.softmax(torch.tensor([1.0, 0.0, -1.0]), 0).numpy()
    for index, sentence in enumerate(sentences):
        numpy.testing.assert_allclose(top[index], layers[index][-1], atol=1e-6)
        numpy.testing.assert_allclose(average[index], layers[index].mean(0), atol=1e-6)
        expected = numpy.einsum("l,ltd->td", weights, layers[index])
        numpy.testing.assert_allclose(mixed[index], expected, atol=1e-5)
    # The same sentence twice in a batch (lines 2 and 4), and alone.
    numpy.testing.assert_allclose(layers[2], layers[4], atol=1e-6)
    numpy.testing.assert_allclose(embedder.embed_sentence(["a", "dog"]), layers[2], atol=1e-5)


def test_embed_sentences_is_lazy_ordered_and_batch_size_independent(embedder):
    sentences = [line.split() for line in SHORT_LINES]
    at_once = embedder.embed_batch(sentences)
    in_twos = list(embedder.embed_sentences(iter(sentences), batch_size=2))
    assert len(in_twos) == len(sentences)
    for one, other in zip(at_once, in_twos):
        numpy.testing.assert_allclose(one, other, atol=1e-5)
    assert embedder.embed_batch([]) == []


def test_api_rejects_bad_arguments(embedder):
    with pytest.raises(ConfigurationError, match="lists of tokens"):
        embedder.embed_batch(["the cat"])
    with pytest.raises(ConfigurationError, match="output must be one of"):
        embedder.embed_batch([["a"]], output="bottom")
    with pytest.raises(ConfigurationError, match="2 mixing weights.*3 layers"):
        embedder.embed_batch([["a"]], output=[0.0, 1.0])
    with pytest.raises(ConfigurationError, match="batch_size"):
        list(embedder.embed_sentences([["a"]], batch_size=0))


# ---------------------------------------------------------------------- hdf5 export


def test_export_all_equals_the_python_api(embedder, elmoc_archive, sentences_file, tmp_path):
    output = embed_file(
        str(elmoc_archive),
        str(sentences_file),
        str(tmp_path / "out.hdf5"),
        "all",
        batch_size=4,
        embedder=embedder,
    )
    expected = list(embedder.embed_sentences([line.split() for line in LINES], batch_size=4))
    with h5py.File(output, "r") as hdf5:
        assert set(hdf5.keys()) == {str(i) for i in range(len(LINES))} | {"sentence_to_index"}
        for index, array in enumerate(expected):
            assert hdf5[str(index)].shape == array.shape
            numpy.testing.assert_allclose(hdf5[str(index)][()], array, atol=1e-5)
        assert hdf5["1"].shape == (3, 0, 12)  # the empty line
        sentence_to_index = json.loads(hdf5["sentence_to_index"][()])
        assert sentence_to_index["the cat sat on the mat"] == "0"
        assert sentence_to_index["a dog"] == "4"  # a repeated sentence maps to its last line
        assert hdf5.attrs["output"] == "all" and hdf5.attrs["num_layers"] == 3
    assert oct(output.stat().st_mode & 0o777) != oct(0o600)


@pytest.mark.parametrize("mode", ["top", "average"])
def test_export_top_and_average(embedder, elmoc_archive, sentences_file, tmp_path, mode):
    output = embed_file(
        str(elmoc_archive),
        str(sentences_file),
        str(tmp_path / f"{mode}.hdf5"),
        mode,
        batch_size=64,
        forget_sentences=True,
        embedder=embedder,
    )
    expected = embedder.embed_batch([line.split() for line in LINES], output=mode)
    with h5py.File(output, "r") as hdf5:
        assert "sentence_to_index" not in hdf5
        for index, array in enumerate(expected):
            assert hdf5[str(index)].shape == (len(LINES[index].split()), 12)
            numpy.testing.assert_allclose(hdf5[str(index)][()], array, atol=1e-5)


class _FailingEmbedder:
    """Embeds one batch, then is interrupted."""

    def __init__(self, embedder, exception):
        self._embedder, self._exception, self.calls = embedder, exception, 0
        self.num_layers, self.output_dim = embedder.num_layers, embedder.output_dim

    def embed_batch(self, sentences, output):
        self.calls += 1
        if self.calls == 2:
            raise self._exception
        return self._embedder.embed_batch(sentences, output)


@pytest.mark.parametrize("exception", [KeyboardInterrupt(), RuntimeError("disk full")])
def test_interrupted_export_leaves_no_file_and_keeps_an_old_one(
    embedder, elmoc_archive, sentences_file, tmp_path, exception
):
    output = tmp_path / "out.hdf5"
    with pytest.raises(type(exception)):
        embed_file(
            str(elmoc_archive),
            str(sentences_file),
            str(output),
            "all",
            batch_size=2,
            embedder=_FailingEmbedder(embedder, exception),
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sentences.txt"]
    output.write_bytes(b"an earlier, complete export")
    with pytest.raises(type(exception)):
        embed_file(
            str(elmoc_archive),
            str(sentences_file),
            str(output),
            "all",
            batch_size=2,
            embedder=_FailingEmbedder(embedder, exception),
            force=True,
        )
    assert output.read_bytes() == b"an earlier, complete export"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.hdf5", "sentences.txt"]


def test_export_bad_paths(embedder, elmoc_archive, sentences_file, tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        embed_file(
            str(elmoc_archive),
            str(tmp_path / "none.txt"),
            str(tmp_path / "o.hdf5"),
            embedder=embedder,
        )
    with pytest.raises(ConfigurationError, match="directory of output file"):
        embed_file(
            str(elmoc_archive),
            str(sentences_file),
            str(tmp_path / "no" / "o.hdf5"),
            embedder=embedder,
        )
    with pytest.raises(ConfigurationError, match="batch-size"):
        embed_file(
            str(elmoc_archive),
            str(sentences_file),
            str(tmp_path / "o.hdf5"),
            batch_size=0,
            embedder=embedder,
        )


def test_command_line_round_trip(embedder, elmoc_archive, sentences_file, tmp_path):
    """
    `allennlp elmoc-embed` as a user runs it: a plugin found through .allennlp_plugins.

    A fresh `allennlp` process (`tests/fresh_process.py`): the plugin must be found through
    .allennlp_plugins at start, and the console output checked is that process's.
    """
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / ".allennlp_plugins").write_text("elmoc_allennlp\n")
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    result = run_python(
        [
            "-m",
            "allennlp",
            "elmoc-embed",
            str(elmoc_archive),
            str(sentences_file),
            "vectors.hdf5",
            "--top",
            "--batch-size",
            "3",
            "--include-package",
            "elmoc_allennlp",
        ],
        cwd=workdir,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "elmoc-embed: 100%" in result.stderr  # the progress bar
    # Issue #48: not allennlp's line per parameter read (about 100 for a 2-sentence export) or left as loaded.
    console = result.stdout + result.stderr
    assert "allennlp.common.params" not in console and "allennlp.nn.initializers" not in console
    assert "Wrote ELMo-C vectors of 6 sentences to" in console
    expected = list(
        embedder.embed_sentences([line.split() for line in LINES], batch_size=3, output="top")
    )
    with h5py.File(workdir / "vectors.hdf5", "r") as hdf5:
        for index, array in enumerate(expected):
            numpy.testing.assert_allclose(hdf5[str(index)][()], array, atol=1e-5)


# ---------------------------------------------------------------------- at the sizes of its blocks


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
def test_lines_at_multiples_of_the_batch_size_are_each_written_once(
    embedder, elmoc_archive, tmp_path, k, offset
):
    batch_size = 3
    lines = [
        SHORT_LINES[index % len(SHORT_LINES)] + f" w{index}"
        for index in range(k * batch_size + offset)
    ]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = embed_file(
        str(elmoc_archive),
        str(source),
        str(tmp_path / "out.hdf5"),
        output="top",
        batch_size=batch_size,
        embedder=embedder,
    )
    expected = embedder.embed_batch([line.split() for line in lines], output="top")  # one batch
    with h5py.File(output, "r") as hdf5:
        assert sorted(hdf5) == sorted(
            [str(index) for index in range(len(lines))] + ["sentence_to_index"]
        )
        assert json.loads(hdf5["sentence_to_index"][()]) == {
            line: str(i) for i, line in enumerate(lines)
        }
        for index, vectors in enumerate(expected):
            numpy.testing.assert_allclose(hdf5[str(index)][()], vectors, atol=1e-5)


# Datasets whose values are a token short of, or a token past, 4,096 bytes (k pages of 48-byte
# top-layer tokens), and lines that JSON escapes to several times their UTF-8 size.
_SIZED_LINES = [
    " ".join(["the"] * 85),
    " ".join(["the"] * 86),
    " ".join(["cat"] * 170),
    " ".join(["cat"] * 171),
    "\U0001f600" * 1000,
    "\x01" * 1000,
    "",
]


@pytest.mark.parametrize("forget_sentences", [False, True])
def test_the_free_space_estimate_bounds_the_file_written(
    embedder, elmoc_archive, tmp_path, forget_sentences
):
    from elmoc_allennlp.commands.elmoc_embed import _bytes_needed

    source = tmp_path / "lines.txt"
    source.write_text("\n".join(_SIZED_LINES) + "\n", encoding="utf-8")
    for output, layers in (("top", 1), ("all", embedder.num_layers)):
        path = embed_file(
            str(elmoc_archive),
            str(source),
            str(tmp_path / f"{output}.hdf5"),
            output=output,
            embedder=embedder,
            forget_sentences=forget_sentences,
        )
        needed = _bytes_needed(_SIZED_LINES, layers, embedder.output_dim, forget_sentences)
        assert path.stat().st_size <= needed, (output, path.stat().st_size, needed)
    # And each line alone, and no line: HDF5's bookkeeping of the file itself counts too.
    for index, lines in enumerate([[line] for line in _SIZED_LINES] + [[]]):
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        path = embed_file(
            str(elmoc_archive),
            str(source),
            str(tmp_path / f"line{index}.hdf5"),
            output="top",
            embedder=embedder,
            forget_sentences=forget_sentences,
        )
        needed = _bytes_needed(lines, 1, embedder.output_dim, forget_sentences)
        assert path.stat().st_size <= needed, (lines[:1], path.stat().st_size, needed)


@pytest.mark.parametrize("spare", [-1, 0, 1], ids=["a_byte_short", "exactly", "a_byte_more"])
def test_the_free_space_check_refuses_only_what_does_not_fit(
    embedder, elmoc_archive, sentences_file, tmp_path, monkeypatch, spare
):
    from elmoc_allennlp.commands import elmoc_embed
    from elmoc_allennlp.common.disk_full import DiskFullError

    needed = elmoc_embed._bytes_needed(LINES, 1, embedder.output_dim)
    real = elmoc_embed.shutil.disk_usage
    monkeypatch.setattr(
        elmoc_embed.shutil, "disk_usage", lambda path: real(path)._replace(free=needed + spare)
    )
    output = tmp_path / "out.hdf5"
    if spare < 0:
        with pytest.raises(DiskFullError, match=str(output)):
            embed_file(
                str(elmoc_archive),
                str(sentences_file),
                str(output),
                output="top",
                embedder=embedder,
            )
        assert sorted(os.listdir(tmp_path)) == ["sentences.txt"]
    else:
        embed_file(
            str(elmoc_archive), str(sentences_file), str(output), output="top", embedder=embedder
        )
        with h5py.File(output, "r") as hdf5:
            assert len(hdf5) == len(LINES) + 1


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("k", [1, 2])
def test_embed_sentences_yields_each_sentence_once_at_multiples_of_the_batch(embedder, k, offset):
    sentences = [line.split() for line in SHORT_LINES * 2][: k * 2 + offset]
    expected = embedder.embed_batch(sentences)
    got = list(embedder.embed_sentences(iter(sentences), batch_size=2))
    assert len(got) == len(sentences)
    for one, other in zip(expected, got):
        numpy.testing.assert_allclose(one, other, atol=1e-5)
