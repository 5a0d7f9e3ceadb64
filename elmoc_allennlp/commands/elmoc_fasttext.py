"""
The `elmoc-fasttext` subcommand: trains the fastText `.bin` an ELMo-C biLM reads its input and target
vectors from (docs/pretraining.md). Defaults: fastText's published English vectors (Bojanowski et
al., 2017: skipgram, 300-d, character n-grams of 3 to 6, 2M buckets).
"""

import argparse
from pathlib import Path

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.commands.subcommand import PluginSubcommand, check_output
from elmoc_allennlp.common.checks import check_positive
from elmoc_allennlp.fasttext.training import MIN_THREADS, import_fasttext, train_fasttext
from elmoc_allennlp.fasttext.vectors import FastTextVectors
from elmoc_allennlp.fasttext.health import measure_vector_health


@Subcommand.register("elmoc-fasttext")
class TrainFastText(PluginSubcommand):
    """`allennlp elmoc-fasttext CORPUS OUTPUT_FILE`: see the module docstring."""

    description = (
        "Train the fastText vectors (.bin) of an ELMo-C biLM on a corpus with one "
        "whitespace-tokenized sentence per line."
    )
    help = "Train fastText vectors for ELMo-C."

    def add_own_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("corpus", help="a text file, one tokenized sentence per line")
        parser.add_argument("output_file", help="the .bin to write")
        parser.add_argument(
            "--model", choices=["skipgram", "cbow"], default="skipgram", help="fastText's model"
        )
        parser.add_argument(
            "--dim", type=int, default=300, help="vector size (the biLM's embedding_dim)"
        )
        parser.add_argument(
            "--min-count", type=int, default=5, help="words seen fewer times get no word row"
        )
        parser.add_argument("--minn", type=int, default=3, help="shortest character n-gram")
        parser.add_argument("--maxn", type=int, default=6, help="longest character n-gram")
        parser.add_argument(
            "--bucket",
            type=int,
            default=2_000_000,
            help="rows for hashed character n-grams (the .bin holds bucket x dim floats)",
        )
        parser.add_argument(
            "--epoch",
            type=int,
            default=None,
            help="passes over the corpus (default: 5 from a million tokens up, more below)",
        )
        parser.add_argument(
            "--allow-degenerate",
            action="store_true",
            help="write the vectors even if nearly collinear (useless as ELMo-C targets)",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> None:
        for option in ("--dim", "--min-count", "--minn", "--bucket"):
            check_positive(getattr(args, option[2:].replace("-", "_")), option)
        check_positive(args.epoch, "--epoch", allow_none=True)
        if args.maxn < args.minn:
            raise ConfigurationError(f"--maxn {args.maxn} is below --minn {args.minn}")
        corpus = Path(args.corpus)
        if not corpus.is_file():
            raise ConfigurationError(f"corpus {args.corpus} is not a file")
        output = check_output(args.output_file, args.force, [("the corpus", args.corpus)])
        try:
            import_fasttext()
        except ImportError as error:
            raise ConfigurationError(str(error)) from None
        # fastText prints its own progress line (words/s, loss, ETA) to stderr.
        path = train_fasttext(
            corpus,
            output,
            model=args.model,
            dim=args.dim,
            min_count=args.min_count,
            minn=args.minn,
            maxn=args.maxn,
            bucket=args.bucket,
            epoch=args.epoch,
            thread=args.threads or MIN_THREADS,
            verbose=2,
            allow_degenerate=args.allow_degenerate,
        )
        health = measure_vector_health(FastTextVectors(path))
        print(
            f"fastText vectors ({args.dim}-d) written to {path}: {health.verdict()}: {health.summary()}"
        )
