#!/usr/bin/env python
"""
What training one direction per job (`model.directions: 'forward'`, merged afterwards with
`allennlp elmoc-merge-bilm`) costs: time per training step (forward + backward + Adam) of one
single-direction job against the biLM, on the same batch, plus trainable parameters.

The encoder still runs the unused direction in the forward pass (without an autograd graph),
so a job is cheaper than the biLM but costs more than half of it.

    python -m benchmarks.scale_directions_cost [--projection-dim 256 --cell-dim 1024] [--steps 10]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--projection-dim", type=int, default=256)
    parser.add_argument("--cell-dim", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    import elmoc_allennlp  # noqa: F401
    from allennlp.common import Params
    from allennlp.data import Batch, Instance, Vocabulary
    from allennlp.data.fields import TextField
    from allennlp.data.tokenizers import Token
    from allennlp.models import Model
    from elmoc_allennlp.data.token_indexers.fasttext_subword_indexer import FastTextSubwordIndexer
    from benchmarks.common import write_fasttext_bin

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    words = ["</s>"] + [f"w{i}" for i in range(2000)]
    with tempfile.TemporaryDirectory() as directory:
        path = write_fasttext_bin(
            Path(directory) / "v.bin",
            words,
            rng.standard_normal((len(words) + 10000, args.dim), dtype=np.float32),
            minn=3,
            maxn=5,
            bucket=10000,
        )
        indexer = FastTextSubwordIndexer(vectors_path=str(path))
        instances = [
            Instance(
                {
                    "tokens": TextField(
                        [Token("<S>")]
                        + [Token(words[rng.integers(1, len(words))]) for _ in range(args.tokens)]
                        + [Token("</S>")],
                        {"fasttext": indexer},
                    )
                }
            )
            for _ in range(args.batch_size)
        ]
        batch = Batch(instances)
        batch.index_instances(Vocabulary.empty())
        tensors = batch.as_tensor_dict()
        results = {}
        for directions in ("both", "forward"):
            model = Model.from_params(
                vocab=Vocabulary.empty(),
                params=Params(
                    {
                        "type": "elmoc_bilm",
                        "directions": directions,
                        "text_field_embedder": {
                            "token_embedders": {
                                "fasttext": {"type": "elmoc_fasttext", "vectors_path": str(path)}
                            }
                        },
                        "contextualizer": {
                            "type": "elmoc_lstm",
                            "input_dim": args.dim,
                            "projection_dim": args.projection_dim,
                            "cell_dim": args.cell_dim,
                        },
                        "output_layer": {
                            "type": "elmoc_continuous",
                            "input_dim": args.projection_dim,
                            "embedding_dim": args.dim,
                        },
                    }
                ),
            ).train()
            parameters = [p for p in model.parameters() if p.requires_grad]
            optimizer = torch.optim.Adam(parameters, lr=1e-4)
            timings = []
            for step in range(args.steps + 2):
                started = time.perf_counter()
                optimizer.zero_grad()
                model(**tensors)["loss"].backward()
                optimizer.step()
                if step >= 2:  # warm-up steps not timed
                    timings.append(time.perf_counter() - started)
            results[directions] = {
                "trainable_parameters": sum(p.numel() for p in parameters),
                "median_ms_per_step": round(1000 * float(np.median(timings)), 1),
            }
            print(directions, results[directions], flush=True)
    both, one = results["both"]["median_ms_per_step"], results["forward"]["median_ms_per_step"]
    results["one_direction_job_over_bilm_time"] = round(one / both, 2)
    results["two_jobs_total_over_bilm_time"] = round(2 * one / both, 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
