"""Training a fastText model (the `.bin` that ELMo-C reads its input and output vectors from)."""

import dataclasses
import logging
from pathlib import Path
from typing import Optional, Union

import numpy

from elmoc_allennlp.common.atomic_files import atomic_path
from elmoc_allennlp.fasttext.vectors import MAX_ABS_VALUE, FastTextVectors
from elmoc_allennlp.fasttext.health import (
    count_tokens,
    degenerate_vectors_error,
    epochs_for,
    measure_vector_health,
    more_epochs_remedy,
)

logger = logging.getLogger(__name__)


def import_fasttext():
    """The `fasttext` module (an optional dependency: the `train` extra), or a clear error."""
    try:
        import fasttext
    except ImportError as error:
        raise ImportError("Training fastText needs pip install -e '.[train]'") from error
    return fasttext


# Training runs at most this many times while the package leaves rows uninitialised.
_ATTEMPTS = 3
# The fewest threads with which fastText's `DenseMatrix::uniform` sets every value of the input matrix
# (ours: rows unset in 64 of 300 trainings with 10 threads, 0 with 11; docs/install.md); rows are checked anyway.
MIN_THREADS = 11


def _uninitialised_rows(matrix) -> int:
    """
    Rows that are all zero, or hold a value not finite or of magnitude `MAX_ABS_VALUE` or more (NaN
    fails `<`).
    """
    return int((~(numpy.abs(matrix) < MAX_ABS_VALUE).all(axis=1) | ~matrix.any(axis=1)).sum())


def train_fasttext(
    corpus_path: Union[str, Path],
    output_path: Union[str, Path],
    *,
    model: str = "skipgram",
    dim: int = 300,
    min_count: int = 5,
    minn: int = 3,
    maxn: int = 6,
    bucket: int = 2_000_000,
    epoch: Optional[int] = None,
    thread: int = 10,
    verbose: int = 0,
    allow_degenerate: bool = False,
) -> Path:
    """
    Trains an unsupervised fastText model, measures its vectors (`measure_vector_health`) and saves its
    `.bin` atomically; degenerate vectors are a `DegenerateVectorsError` and nothing is written.

    # Parameters

    corpus_path : `Union[str, Path]`
        A plain-text file, one whitespace-tokenized sentence per line.
    output_path : `Union[str, Path]`
        Where to write the `.bin`.
    model : `str`, optional (default = `"skipgram"`)
        fastText's `"skipgram"` or `"cbow"`. The defaults of this and the next five are those of
        fastText's English vectors (Bojanowski et al., 2017), passed to `train_unsupervised`.
    dim : `int`, optional (default = `300`)
        The dimension of the vectors (300: that of the paper's `crawl-300d-2M-subword`).
    min_count : `int`, optional (default = `5`)
        Words seen fewer times get no row of their own (their vectors come from n-grams).
    minn : `int`, optional (default = `3`)
        The shortest character n-gram.
    maxn : `int`, optional (default = `6`)
        The longest character n-gram.
    bucket : `int`, optional (default = `2_000_000`)
        The rows the n-grams are hashed into (each row `dim` floats: the `.bin`'s bulk).
    epoch : `int`, optional (default = `None`)
        Passes over the corpus; by default chosen from its token count (`epochs_for`).
    thread : `int`, optional (default = `10`)
        fastText's training threads; at least `MIN_THREADS` (11) are used, the fewest with which
        fastText initializes every row of its input matrix.
    verbose : `int`, optional (default = `0`)
        fastText's progress output: `0` none, `2` a progress line.
    allow_degenerate : `bool`, optional (default = `False`)
        Save degenerate vectors with a warning instead of raising.
    """
    fasttext = import_fasttext()
    corpus_path = Path(corpus_path)
    output_path = Path(output_path)
    if not corpus_path.is_file():
        raise FileNotFoundError(f"fastText training corpus not found: {corpus_path}")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    if epoch is None:
        tokens = count_tokens(corpus_path)
        epoch = epochs_for(tokens)
        logger.info("%s has %s tokens: training %d epochs", corpus_path, f"{tokens:,}", epoch)
    logger.info("Training fastText %s (dim=%d, %d epochs) on %s", model, dim, epoch, corpus_path)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            ft_model = fasttext.train_unsupervised(
                str(corpus_path),
                model=model,
                dim=dim,
                minCount=min_count,
                minn=minn,
                maxn=maxn,
                bucket=bucket,
                epoch=epoch,
                thread=max(thread, MIN_THREADS),
                verbose=verbose,
            )
        except RuntimeError as error:
            raise RuntimeError(f"fastText training on {corpus_path} failed: {error}") from error
        bad_rows = _uninitialised_rows(ft_model.get_input_matrix())
        if not bad_rows:
            break
        logger.warning(
            "fastText training on %s left %d row(s) of the input matrix uninitialised (a bug of the "
            "fasttext package); training again (attempt %d of %d)",
            corpus_path,
            bad_rows,
            attempt + 1,
            _ATTEMPTS,
        )
    else:
        raise RuntimeError(
            f"fastText training on {corpus_path} left {bad_rows:,} uninitialised rows "
            f"(all-zero, not finite, or of magnitude {MAX_ABS_VALUE:g} or more) in {_ATTEMPTS} attempts"
        )
    with atomic_path(output_path) as temporary_path:
        ft_model.save_model(temporary_path)
        health = dataclasses.replace(
            measure_vector_health(FastTextVectors(temporary_path)), path=str(output_path)
        )
        logger.info("fastText vectors %s: %s", output_path, health.summary())
        if health.degenerate:
            remedy = more_epochs_remedy(epoch, count_tokens(corpus_path))
            if not allow_degenerate:
                # Raised inside atomic_path: nothing is written, an existing file is kept.
                raise degenerate_vectors_error(health, remedy + " Nothing was written.")
            logger.warning("%s", degenerate_vectors_error(health, remedy + " Saved anyway."))
    return output_path
