"""allennlp's multi-process data loader, with the length of an epoch known from the corpus index."""

import math
from typing import Iterator, Optional

from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.data_loaders.multiprocess_data_loader import MultiProcessDataLoader
from allennlp.data.samplers import BucketBatchSampler

from elmoc_allennlp.data.dataset_readers.corpus_shares import EpochLengthError, process_rank


class _SizedIterator:
    """The batches of one epoch with their number (`len`); one counted from the index (`checked`) is checked."""

    def __init__(
        self, batches: Iterator[TensorDict], length: int, checked: Optional[str] = None
    ) -> None:
        self._batches = batches
        self._length = length
        self._checked = checked
        self._given = 0

    def __iter__(self) -> "_SizedIterator":
        return self

    def __next__(self) -> TensorDict:
        try:
            batch = next(self._batches)
        except StopIteration:
            if self._checked is not None and self._given != self._length:
                raise self._error("ended after") from None
            raise
        self._given += 1
        if self._checked is not None and self._given > self._length:
            raise self._error("went on past")
        return batch

    def __len__(self) -> int:
        return self._length

    def _error(self, what: str) -> EpochLengthError:
        return EpochLengthError(
            f"The epoch of {self._checked} {what} {self._given} batches where the loader's len() is "
            f"{self._length}, counted from the corpus index: instances were lost or added"
        )


@DataLoader.register("elmoc_corpus")
class CorpusDataLoader(MultiProcessDataLoader):
    """
    allennlp's `MultiProcessDataLoader` (same parameters, same batches) whose `len()` is known also
    when it reads lazily: counted from the `elmoc_lm_corpus` reader's share sizes (with no sampler or
    the `bucket` one), and an epoch of another length raises an `EpochLengthError`.

    Registered as a `DataLoader` with name "elmoc_corpus".
    """

    def __len__(self) -> int:
        counted = self._counted_length()
        return super().__len__() if counted is None else counted

    def _counted_length(self) -> Optional[int]:
        """The epoch's batches counted from the reader's share sizes (`None`: not countable)."""
        if self.batches_per_epoch is not None or self.max_instances_in_memory is None:
            # Without `max_instances_in_memory` allennlp's loader holds the instances: it counts.
            return None
        share_sizes = getattr(self.reader, "share_sizes", None)
        countable = self.batch_sampler is None or type(self.batch_sampler) is BucketBatchSampler
        if share_sizes is None or not countable:
            return None
        size = (
            self.batch_size if self.batch_sampler is None else self.batch_sampler.get_batch_size()
        )
        if not isinstance(size, int) or size < 1:
            return None  # a bad batch size: its error comes from where it is checked
        return sum(
            self._batches_of(size) for size in share_sizes(self.data_path, max(1, self.num_workers))
        )

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

    def _where(self) -> str:
        rank, world_size = process_rank(getattr(self.reader, "_distributed_info", None))
        return (
            str(self.data_path)
            if world_size == 1
            else f"{self.data_path} on rank {rank} of {world_size}"
        )

    def __iter__(self) -> Iterator[TensorDict]:
        batches = super().__iter__()
        try:
            counted = self._counted_length()
            length = super().__len__() if counted is None else counted
        except TypeError:
            return batches
        return _SizedIterator(batches, length, self._where() if counted is not None else None)
