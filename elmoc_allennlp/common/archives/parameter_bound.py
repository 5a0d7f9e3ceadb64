"""The parameters a model config builds at least, from its sizes alone, so that a config implying more
than `ELMOC_ARCHIVE_MAX_PARAMETERS` (or its weights hold) is refused before any layer is built."""

from typing import Any, Tuple

from elmoc_allennlp.common.archives.limits import walk

# Keys of sizes that make a layer's weight matrices.
_DIMENSION_KEYS = frozenset(
    "input_dim hidden_dim cell_dim projection_dim embedding_dim output_dim input_size hidden_size "
    "feedforward_hidden_dim num_filters hidden_dims output_dims".split()
)


def config_parameter_bound(config: Any, prefix: str = "model") -> Tuple[int, str]:
    """
    A lower bound of the parameters a model config builds, and the dotted key adding most: each object
    with two or more sizes holds a (smallest x largest) matrix, and each of its `num_layers` past the
    first a (smallest x smallest) one (as in LSTMs, transformers, feedforward and maxout stacks).
    """
    total, largest = 0, (0, prefix)
    for where, _, value, _ in walk(config, prefix):
        if not isinstance(value, dict):
            continue
        sizes = {
            name: item
            for name, item in value.items()
            if isinstance(item, int) and not isinstance(item, bool) and item > 0
        }
        dimensions = {name: size for name, size in sizes.items() if name in _DIMENSION_KEYS}
        if len(dimensions) < 2:  # one size alone says nothing of a layer's matrices
            continue
        smallest, largest_name = min(dimensions.values()), max(dimensions, key=dimensions.get)
        matrix = smallest * dimensions[largest_name]
        stacked = (sizes.get("num_layers", 1) - 1) * smallest * smallest
        total += matrix + stacked
        largest = max(
            largest,
            (matrix + stacked, f"{where}.{'num_layers' if stacked > matrix else largest_name}"),
        )
    return total, largest[1]
