"""
The parameter bound: how many parameters a model config builds at least, from its sizes alone,
so that a config implying more than `ELMOC_ARCHIVE_MAX_PARAMETERS` (or more than its weights
hold) is refused before any layer is built.
"""
from typing import Any, Tuple

# Keys of sizes that make a layer's weight matrices, and of how many layers are stacked.
_DIMENSION_KEYS = frozenset((
    "input_dim", "hidden_dim", "cell_dim", "projection_dim", "embedding_dim", "output_dim",
    "input_size", "hidden_size", "feedforward_hidden_dim", "num_filters", "hidden_dims",
    "output_dims",
))
_LAYER_COUNT_KEYS = frozenset(("num_layers",))


def config_parameter_bound(config: Any, prefix: str = "model") -> Tuple[int, str]:
    """
    A lower bound of the parameters a model config builds, computed from its sizes before any
    layer is built, and the dotted key that adds most to it. Each object with two or more sizes
    (`input_dim`, `cell_dim`, `projection_dim`, ...) holds at least a (smallest x largest)
    matrix, and each of its `num_layers` past the first a (smallest x smallest) one (as in
    LSTMs, transformers, feedforward and maxout stacks; an object with one size adds nothing).
    """
    total, largest = 0, (0, prefix)
    stack = [(prefix, config)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, list):
            stack.extend((f"{where}.{index}", item) for index, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        dimensions = {}
        layers = (1, "")
        for name, item in value.items():
            if isinstance(item, (dict, list)):
                stack.append((f"{where}.{name}", item))
            elif isinstance(item, int) and not isinstance(item, bool) and item > 0:
                if name in _DIMENSION_KEYS:
                    dimensions[name] = item
                elif name in _LAYER_COUNT_KEYS:
                    layers = (item, name)
        if len(dimensions) < 2:  # one size alone says nothing of a layer's matrices
            continue
        smallest, largest_name = min(dimensions.values()), max(dimensions, key=dimensions.get)
        matrix = smallest * dimensions[largest_name]
        stacked = (layers[0] - 1) * smallest * smallest
        bound = matrix + stacked
        key = f"{where}.{layers[1] if stacked > matrix else largest_name}"
        total += bound
        largest = max(largest, (bound, key))
    return total, largest[1]
