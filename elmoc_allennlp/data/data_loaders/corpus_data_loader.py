"""allennlp's multi-process data loader, with the length of an epoch known from the corpus index."""
import math
from typing import Iterator

from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.data_loaders.multiprocess_data_loader import MultiProcessDataLoader
from allennlp.data.samplers import BucketBatchSampler


class _SizedIterator:
    """The batches of one epoch, with their number (for `tqdm`'s total and ETA)."""

    def __init__(self, batches: Iterator[TensorDict], length: int) -> None:
        self._batches = batches
        self._length = length

    def __iter__(self) -> "_SizedIterator":
        return self

    def __next__(self) -> TensorDict:
        return next(self._batches)

    def __len__(self) -> int:
        return self._length


@DataLoader.register("elmoc_corpus")
class CorpusDataLoader(MultiProcessDataLoader):
    """
    allennlp's `MultiProcessDataLoader` (same parameters, same batches), whose `len()` is the
    number of batches of this process's share of an epoch also when it reads lazily
    (`max_instances_in_memory`, which allennlp's loader cannot count): the reader
    (`elmoc_lm_corpus`) counts the instances of each loader worker's share from its corpus
    index, and the batches follow from the batch size or
    the `bucket` sampler (each worker batches its own instances, `max_instances_in_memory` at a
    time). So the training and validation progress bars and `allennlp evaluate` show `N/M`, a
    rate and an ETA from the first epoch. With a reader that cannot count its instances, or a
    batch sampler whose number of batches depends on the instances (`max_tokens_sampler`),
    `len()` is allennlp's.

    Registered as a `DataLoader` with name "elmoc_corpus".
    """

    def __len__(self) -> int:
        if self.batches_per_epoch is not None or self.max_instances_in_memory is None:
            # Without `max_instances_in_memory` allennlp's loader holds the instances: it counts.
            return super().__len__()
        share_sizes = getattr(self.reader, "share_sizes", None)
        batches = self._batches_of if share_sizes is not None else None
        countable = self.batch_sampler is None or type(self.batch_sampler) is BucketBatchSampler
        if batches is None or not countable:
            return super().__len__()
        size = self.batch_size if self.batch_sampler is None else self.batch_sampler.get_batch_size()
        if not isinstance(size, int) or size < 1:
            return super().__len__()  # a bad batch size: its error comes from where it is checked
        return sum(batches(size) for size in share_sizes(self.data_path, max(1, self.num_workers)))

    def _batches_of(self, num_instances: int) -> int:
        """The batches made of one reader's `num_instances` instances."""
        if self.batch_sampler is None:
            # Batched as one stream (shuffled `max_instances_in_memory` at a time).
            return self._groups(num_instances, self.batch_size, self.drop_last)
        size = self.batch_sampler.get_batch_size()
        drop_last = self.batch_sampler.drop_last
        chunk: int = self.max_instances_in_memory  # type: ignore[assignment]
        full, rest = divmod(num_instances, chunk)
        return full * self._groups(chunk, size, drop_last) + self._groups(rest, size, drop_last)

    @staticmethod
    def _groups(num_instances: int, batch_size: int, drop_last: bool) -> int:
        return num_instances // batch_size if drop_last else math.ceil(num_instances / batch_size)

    def __iter__(self) -> Iterator[TensorDict]:
        batches = super().__iter__()
        try:
            length = len(self)
        except TypeError:
            return batches
        return _SizedIterator(batches, length)
