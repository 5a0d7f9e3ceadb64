"""
A guest changes nothing it does not own (issue #42): stock allennlp models, archives and commands
give the same results, errors and output files with the plugin imported as without it.

Each side runs in a fresh process (`tests/fresh_process.py`; `allennlp` commands by
`allennlp.commands.main`, in a folder without `.allennlp_plugins`): without the plugin, with
`--include-package elmoc_allennlp`, and with the opt-in switch `elmoc_allennlp_hardening`. The model
is a stock text classifier with allennlp's `elmo_token_embedder`, whose `options_file` and
`weight_file` are URLs (as in the ELMo archives allennlp-models publishes), served offline by a
local HTTP server from a tiny ELMo written here. Steps: `train`; `evaluate` and `predict` of the
archive trained without the plugin; a `from_archive` fine-tune of it (trained, then evaluated); and
`evaluate` of a copy whose `weights.th` is written with torch's legacy (non-zip) serialization.
"""

import functools
import http.server
import json
import os
import threading
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

from tests.fresh_process import run_python

REPO_ROOT = Path(__file__).resolve().parents[1]

OPTIONS = {
    "lstm": {
        "use_skip_connections": True,
        "projection_dim": 4,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 6,
        "n_layers": 2,
    },
    "char_cnn": {
        "activation": "relu",
        "filters": [[1, 4], [2, 4]],
        "n_highway": 1,
        "embedding": {"dim": 3},
        "n_characters": 262,
        "max_characters_per_token": 50,
    },
}


def write_tiny_elmo(folder: Path) -> None:
    """`options.json` and `weights.hdf5` of a tiny ELMo in the layout allennlp's `Elmo` reads."""
    import h5py

    rng = np.random.default_rng(0)
    lstm, cnn = OPTIONS["lstm"], OPTIONS["char_cnn"]
    filters = sum(number for _, number in cnn["filters"])

    def values(*shape):
        return (rng.standard_normal(shape) * 0.1).astype("float32")

    with h5py.File(folder / "weights.hdf5", "w") as out:
        out["char_embed"] = values(cnn["n_characters"] - 1, cnn["embedding"]["dim"])
        for index, (width, number) in enumerate(cnn["filters"]):
            out[f"CNN/W_cnn_{index}"] = values(1, width, cnn["embedding"]["dim"], number)
            out[f"CNN/b_cnn_{index}"] = values(number)
        for name, shape in (
            ("W_transform", (filters, filters)),
            ("W_carry", (filters, filters)),
            ("b_transform", (filters,)),
            ("b_carry", (filters,)),
        ):
            out[f"CNN_high_0/{name}"] = values(*shape)
        out["CNN_proj/W_proj"] = values(filters, lstm["projection_dim"])
        out["CNN_proj/b_proj"] = values(lstm["projection_dim"])
        for direction in range(2):
            for layer in range(lstm["n_layers"]):
                cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
                out[f"{cell}/W_0"] = values(2 * lstm["projection_dim"], 4 * lstm["dim"])
                out[f"{cell}/B"] = values(4 * lstm["dim"])
                out[f"{cell}/W_P_0"] = values(lstm["dim"], lstm["projection_dim"])
    (folder / "options.json").write_text(json.dumps(OPTIONS))


def classifier_config(data: Path, elmo_url: str) -> Dict:
    return {
        "dataset_reader": {
            "type": "text_classification_json",
            "tokenizer": {"type": "whitespace"},
            # `tokens`: basic_classifier reports the token ids, which ELMo's characters are not.
            "token_indexers": {
                "elmo": {"type": "elmo_characters"},
                "tokens": {"type": "single_id"},
            },
        },
        "train_data_path": str(data),
        "validation_data_path": str(data),
        "model": {
            "type": "basic_classifier",
            "text_field_embedder": {
                "token_embedders": {
                    "elmo": {
                        "type": "elmo_token_embedder",
                        "options_file": f"{elmo_url}/options.json",
                        "weight_file": f"{elmo_url}/weights.hdf5",
                        "do_layer_norm": False,
                        "dropout": 0.0,
                    },
                    "tokens": {"type": "embedding", "embedding_dim": 2},
                }
            },
            "seq2vec_encoder": {"type": "boe", "embedding_dim": 10},
        },
        "data_loader": {"batch_size": 2, "shuffle": False},
        "trainer": {"optimizer": {"type": "adam", "lr": 0.01}, "num_epochs": 2, "cuda_device": -1},
    }


# One side of the comparison, in a fresh process: argv = [mode, work folder, reference].
PROBE = r"""
import json, os, sys, tarfile, traceback
mode, work, reference = sys.argv[1], sys.argv[2], sys.argv[3]
plugins = {"stock": [], "plugin": ["elmoc_allennlp"],
           "switch": ["elmoc_allennlp", "elmoc_allennlp_hardening"]}[mode]
import torch
torch.set_num_threads(1)
from allennlp.commands import main

def allennlp(*args):
    flags = [flag for name in plugins for flag in ("--include-package", name)]
    sys.argv = ["allennlp", *args, *flags]
    try:
        main(prog="allennlp")
    except SystemExit as error:
        if error.code:
            return {"error": "SystemExit", "code": error.code}
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)[:400]}
    return None

def numbers(path):
    values = json.load(open(path))
    return {k: round(v, 6) for k, v in values.items()
            if isinstance(v, float) and ("loss" in k or "accuracy" in k)}

def files(folder):
    return sorted(os.path.relpath(os.path.join(top, name), folder)
                  for top, _, names in os.walk(folder) for name in names)

result = {}
run = os.path.join(work, "run")
failed = allennlp("train", os.path.join(work, "config.json"), "-s", run)
result["train"] = failed or {"metrics": numbers(os.path.join(run, "metrics.json")),
                             "files": files(run)}
legacy = reference.replace(".tar.gz", "-legacy.tar.gz")
# weights.th by torch's legacy (pre-1.6, non-zip) serialization
if os.path.exists(reference) and not os.path.exists(legacy):
    import io
    with tarfile.open(reference) as source, tarfile.open(legacy, "w:gz") as copy:
        for member in source:
            data = source.extractfile(member).read() if member.isfile() else None
            if member.name == "weights.th":
                buffer = io.BytesIO()
                torch.save(torch.load(io.BytesIO(data)), buffer, _use_new_zipfile_serialization=False)
                data = buffer.getvalue()
                assert not data.startswith(b"PK")
                member.size = len(data)
            copy.addfile(member, io.BytesIO(data) if data is not None else None)
for name, archive in (("evaluate", reference), ("evaluate-legacy", legacy)):
    out = os.path.join(work, name + ".json")
    failed = allennlp("evaluate", archive, os.path.join(work, "data.jsonl"), "--output-file", out)
    result[name] = failed or {"metrics": numbers(out)}
out = os.path.join(work, "predictions.jsonl")
failed = allennlp("predict", reference, os.path.join(work, "data.jsonl"), "--output-file", out,
                  "--silent", "--use-dataset-reader")
result["predict"] = failed or {"probs": [
    [round(p, 6) for p in json.loads(line)["probs"]] for line in open(out)]}
tune = os.path.join(work, "finetune")
failed = allennlp("train", os.path.join(work, "finetune.json"), "-s", tune)
if not failed:
    out = os.path.join(work, "finetune-evaluate.json")
    failed = allennlp("evaluate", os.path.join(tune, "model.tar.gz"),
                      os.path.join(work, "data.jsonl"), "--output-file", out)
    failed = failed or {"metrics": numbers(out), "files": files(tune)}
result["from_archive"] = failed
print("RESULT " + json.dumps(result))
"""

LINES = [
    ("a fine bank", "pos"),
    ("the river bank flooded", "neg"),
    ("rates rose", "pos"),
    ("bad loans", "neg"),
    ("good news today", "pos"),
    ("a sad day", "neg"),
]


@pytest.fixture(scope="module")
def served_elmo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("elmo-server")
    (folder / "elmo").mkdir()
    write_tiny_elmo(folder / "elmo")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/elmo"
    server.shutdown()


def _prepare(work: Path, url: str, reference: Path) -> None:
    work.mkdir(parents=True)
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in LINES))
    (work / "config.json").write_text(json.dumps(classifier_config(data, url)))
    finetune = classifier_config(data, url)
    finetune["model"] = {"type": "from_archive", "archive_file": str(reference)}
    finetune["trainer"]["num_epochs"] = 1
    (work / "finetune.json").write_text(json.dumps(finetune))


def _run(mode: str, work: Path, reference: Path) -> Dict:
    environment = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        OMP_NUM_THREADS="1",
        ALLENNLP_CACHE_ROOT=str(work / "cache"),
        CACHED_PATH_CACHE_ROOT=str(work / "cache"),
    )
    result = run_python(
        ["-c", PROBE, mode, str(work), str(reference)], cwd=work, env=environment, timeout=900
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture(scope="module")
def outcomes(served_elmo, tmp_path_factory) -> Dict[str, Dict]:
    """
    Each mode's outcomes (stock, plugin, switch), step by step.

    Slow (~27 s): three fresh processes, each really training the stock ELMo text classifier,
    then evaluating, predicting and fine-tuning it with allennlp's own commands, because the claim
    is that whole stock runs give the same outcomes with the plugin as without it.
    """
    root = tmp_path_factory.mktemp("good-guest")
    reference = root / "stock" / "run" / "model.tar.gz"  # trained first, without the plugin
    results = {}
    for mode in ("stock", "plugin", "switch"):
        _prepare(root / mode, served_elmo, reference)
        results[mode] = _run(mode, root / mode, reference)
    return results


STEPS = ("train", "evaluate", "evaluate-legacy", "predict", "from_archive")


def test_stock_steps_work_without_the_plugin(outcomes):
    """
    Every stock step succeeds without the plugin: the baseline the other modes are compared with.

    Slow (~27 s, in the module-scoped `outcomes` setup): the stock allennlp pipeline (train,
    evaluate, predict, fine-tune) runs for real in fresh processes without the plugin, with it
    and with the switch, because only whole runs show that the plugin changes no stock outcome.
    """
    stock = outcomes["stock"]
    for step in STEPS:
        assert "error" not in (stock[step] or {}), (step, stock[step])
    assert stock["train"]["metrics"]["best_validation_accuracy"] >= 0.0
    assert len(stock["predict"]["probs"]) == len(LINES)
    # The legacy weights are the same weights: the same metrics.
    assert stock["evaluate-legacy"] == stock["evaluate"]


@pytest.mark.parametrize("step", STEPS)
def test_the_plugin_changes_no_stock_outcome(outcomes, step):
    """Same metrics, predictions, errors and output files, step by step."""
    assert outcomes["plugin"][step] == outcomes["stock"][step]


def test_the_switch_refuses_what_it_documents_and_changes_nothing_else(outcomes):
    stock, switch = outcomes["stock"], outcomes["switch"]
    # A config you write may name URLs; training and its files are as stock.
    assert switch["train"] == stock["train"]
    # An archive that names URLs, or whose weights are legacy, is refused naming the archive and
    # the key or member; the fine-tune opens such an archive.
    for step, words in (
        (
            "evaluate",
            ("model.tar.gz (config.json): model.text_field_embedder.token_embedders.elmo.", "URL"),
        ),
        (
            "predict",
            ("model.tar.gz (config.json): model.text_field_embedder.token_embedders.elmo.", "URL"),
        ),
        (
            "from_archive",
            ("model.tar.gz (config.json): model.text_field_embedder.token_embedders.elmo.", "URL"),
        ),
        ("evaluate-legacy", ("model-legacy.tar.gz", "'weights.th'", "not a torch weights file")),
    ):
        assert switch[step]["error"] in ("ConfigurationError", "UnsafeArchiveError"), (
            step,
            switch[step],
        )
        for word in words:
            assert word in switch[step]["message"], (step, switch[step])
