"""Training a fastText model (the `.bin` that ELMo-C reads its input and output vectors from)."""
import logging
from pathlib import Path
from typing import Union

from elmoc_allennlp.common.atomic_files import atomic_path

logger = logging.getLogger(__name__)


def import_fasttext():
    """The `fasttext` module (an optional dependency: the `train` extra), or a clear error."""
    try:
        import fasttext
    except ImportError as error:
        raise ImportError("Training fastText needs pip install -e '.[train]'") from error
    return fasttext


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
    epoch: int = 5,
    thread: int = 10,
    verbose: int = 0,
) -> Path:
    """
    Trains an unsupervised fastText model on a tokenized corpus (one sentence per line) and saves
    its `.bin` to `output_path` atomically.

    # Parameters

    corpus_path : `Union[str, Path]`
        A plain-text file, one whitespace-tokenized sentence per line.
    output_path : `Union[str, Path]`
        Where to write the `.bin`.
    model, dim, min_count, minn, maxn, bucket, epoch, thread, verbose
        Passed to `fasttext.train_unsupervised`; the defaults are those of fastText's English
        vectors (Bojanowski et al., 2017). `thread` is at least 10: with fewer, fasttext-numpy2
        0.10.4 leaves rows of the input matrix uninitialised (checked before saving).
    """
    fasttext = import_fasttext()
    corpus_path = Path(corpus_path)
    output_path = Path(output_path)
    if not corpus_path.is_file():
        raise FileNotFoundError(f"fastText training corpus not found: {corpus_path}")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Training fastText %s (dim=%d) on %s", model, dim, corpus_path)
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
            thread=max(thread, 10),
            verbose=verbose,
        )
    except RuntimeError as error:
        raise RuntimeError(f"fastText training on {corpus_path} failed: {error}") from error
    zero_rows = int((abs(ft_model.get_input_matrix()).sum(axis=1) == 0).sum())
    if zero_rows:
        raise RuntimeError(f"fastText training on {corpus_path} left {zero_rows:,} all-zero rows")
    with atomic_path(output_path) as temporary_path:
        ft_model.save_model(temporary_path)
    return output_path
