"""A Python API for ELMo-C vectors, in the role of allennlp 0.x's `ElmoEmbedder`."""

from typing import Iterable, Iterator, List, Optional, Sequence, Union

import numpy
import torch

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import lazy_groups_of
from allennlp.nn.util import remove_sentence_boundaries

from elmoc_allennlp.common.checks import check_cuda_device, check_one_of, check_positive
from elmoc_allennlp.common.precision import check_device, check_dtype
from elmoc_allennlp.data.token_indexers.bilm_input_indexers import indexed_batch
from elmoc_allennlp.downstream.elmoc import ElmocBiLm

Output = Union[str, Sequence[float]]


class ElmocEmbedder:
    """
    ELMo-C representations of tokenized sentences, one `float32` array per sentence: with
    `output="all"` `(num_layers, num_tokens, dim)`, else `(num_tokens, dim)` of the `"top"` layer,
    the `"average"`, or the mix of `num_layers` pre-softmax weights. Independent of the batch.
    `running_dtype` is the precision the biLM runs at (`dtype`, or `"float32"` for `"bfloat16"`
    where the device has no native bfloat16).

    # Parameters

    archive_file : `str`
        The trained biLM: the `model.tar.gz` of its `allennlp train` run (or that run's folder, or a
        URL). A relative path resolves against the working directory, as allennlp's data paths do.
    cuda_device : `int`, optional (default = `-1`)
        The GPU to run on; -1 for the CPU.
    vectors_path : `str`, optional (default = `None`)
        The fastText `.bin` the biLM was pretrained with, where it is on this machine. `None`: the
        path the archive records, else its last 1-3 path components under the archive's folder and
        that folder's parent; `ELMOC_VECTORS_PATH`, if set, overrides both. It must be the biLM's
        own model (its fingerprint is recorded in the biLM's weights) unless
        `allow_different_vectors`; a biLM whose input is not fastText takes none.
    allow_different_vectors : `bool`, optional (default = `False`)
        Accept a fastText `.bin` other than the one the biLM was trained with (another fingerprint),
        with a warning. Off by default because the biLM's input projection and output layer live in
        its own fastText model's vector space: only for a deliberate swap.
    lowercase_tokens : `bool`, optional (default = `False`)
        `True` lowercases every token; `False` indexes tokens as the biLM's pretraining indexer did
        (lowercasing them if it did).
    dtype : `str`, optional (default = `"float32"`)
        The precision the biLM runs in: `"float32"` (as trained), `"bfloat16"` (its linear maps in
        bfloat16 where the device has native bfloat16: CPUs with AVX-512 BF16 or AMX, CUDA GPUs
        that support it; elsewhere float32, with one warning saying so) or `"int8"` (its linear
        maps dynamically quantized; CPU only). The arrays returned are float32 in every case
        (docs/benchmarks.md#inference-precision).
    """

    def __init__(
        self,
        archive_file: str,
        cuda_device: int = -1,
        vectors_path: Optional[str] = None,
        allow_different_vectors: bool = False,
        lowercase_tokens: bool = False,
        dtype: str = "float32",
    ) -> None:
        check_cuda_device(cuda_device, "cuda_device")
        check_dtype(dtype, "dtype")
        self._device = torch.device("cpu") if cuda_device < 0 else torch.device("cuda", cuda_device)
        check_device(dtype, self._device, "dtype")
        self._bilm = ElmocBiLm(
            archive_file,
            vectors_path=vectors_path,
            allow_different_vectors=allow_different_vectors,
            dtype=dtype,
        )
        self._bilm.eval()
        archive = self._bilm.archive
        self._indexer = archive.input_kind.indexer(archive, lowercase_tokens or None, 0)
        self._bilm.to(self._device)
        self.running_dtype = self._bilm.prepare_dtype(self._device)

    @property
    def num_layers(self) -> int:
        return self._bilm.num_layers

    @property
    def output_dim(self) -> int:
        return self._bilm.get_output_dim()

    @property
    def bilm(self) -> ElmocBiLm:
        return self._bilm

    def batch_to_ids(self, sentences: List[List[str]]) -> torch.LongTensor:
        """The `elmo_tokens` tensor of a batch, as the `elmoc_bilm_inputs` indexer makes it."""
        return indexed_batch(self._indexer, sentences, self._device)

    def embed_batch(
        self, sentences: List[List[str]], output: Output = "all"
    ) -> List[numpy.ndarray]:
        """Embeds a batch of tokenized sentences; returns one array per sentence."""
        weights = self._mix_weights(output)
        sentences = [
            sentence if isinstance(sentence, str) else list(sentence) for sentence in sentences
        ]
        for sentence in sentences:
            if isinstance(sentence, str):
                raise ConfigurationError(
                    f"sentences must be lists of tokens, got {sentence[:50]!r}"
                )
        if not sentences:
            return []
        with torch.no_grad():
            bilm_output = self._bilm(self.batch_to_ids(sentences))
            activations = torch.stack(
                bilm_output["activations"], dim=2
            )  # (batch, timesteps, layers, dim)
            stacked, mask = remove_sentence_boundaries(activations, bilm_output["mask"])
            stacked = stacked.transpose(1, 2)  # (batch, num_layers, timesteps, dim)
            if weights is not None:
                stacked = torch.einsum("l,bltd->btd", weights.to(stacked.device), stacked)
            elif output == "top":
                stacked = stacked[:, -1]
            elif output == "average":
                stacked = stacked.mean(dim=1)
        arrays = stacked.cpu().numpy()
        lengths = mask.sum(-1).tolist()
        if output == "all":
            return [arrays[index, :, :length] for index, length in enumerate(lengths)]
        return [arrays[index, :length] for index, length in enumerate(lengths)]

    def embed_sentence(self, sentence: List[str], output: Output = "all") -> numpy.ndarray:
        """Embeds one tokenized sentence."""
        return self.embed_batch([sentence], output)[0]

    def embed_sentences(
        self, sentences: Iterable[List[str]], batch_size: int = 64, output: Output = "all"
    ) -> Iterator[numpy.ndarray]:
        """Embeds any number of tokenized sentences, `batch_size` at a time, lazily and in order."""
        check_positive(batch_size, "batch_size")
        for batch in lazy_groups_of(iter(sentences), batch_size):
            yield from self.embed_batch(batch, output)

    def _mix_weights(self, output: Output) -> Optional[torch.Tensor]:
        if isinstance(output, str):
            check_one_of(output, ("all", "top", "average"), "output")
            return None
        weights = torch.as_tensor(list(output), dtype=torch.float32)
        if weights.dim() != 1 or len(weights) != self.num_layers:
            raise ConfigurationError(
                f"output has {len(list(output))} mixing weights, but the biLM has {self.num_layers} layers"
            )
        return torch.softmax(weights, dim=0)
