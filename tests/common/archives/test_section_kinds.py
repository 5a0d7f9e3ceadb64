"""
The kind check of archived configs (`section_kinds.py`, issue #48): each section loading builds, and
each nested slot whose base class its constructor's annotation gives (`X`, `Optional[X]`, `Lazy[X]`,
lists and dicts of `X`), names a type of that kind; checked as data, importing nothing.
"""

import sys
from typing import Dict, List, Optional

import pytest
from allennlp.common import Lazy, Registrable
from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives.section_kinds import _check_slot, check_section_kinds


class _Part(Registrable):
    default_implementation = "plain"


@_Part.register("plain")
class _PlainPart(_Part):
    def __init__(self, size: int = 1) -> None:
        self.size = size


class _Other(Registrable):
    pass


@_Other.register("other")
class _OtherThing(_Other):
    pass


class _Holder(Registrable):
    pass


@_Holder.register("holder")
class _PlainHolder(_Holder):
    def __init__(
        self,
        part: Optional[_Part] = None,
        parts: Optional[List[_Part]] = None,
        named: Optional[Dict[str, _Part]] = None,
        later: Optional[Lazy[_Part]] = None,
        anything: Optional[dict] = None,
    ) -> None:
        pass


_MODULE = __name__
_OTHER = f"{_MODULE}._OtherThing"


@pytest.mark.parametrize(
    "config, key",
    [
        ({"type": "holder", "part": {"type": _OTHER}}, "holder.part.type"),
        ({"type": "holder", "parts": [{"type": "plain"}, {"type": _OTHER}]}, "holder.parts.1.type"),
        ({"type": "holder", "named": {"x": {"type": _OTHER}}}, "holder.named.x.type"),
        ({"type": "holder", "later": {"type": _OTHER}}, "holder.later.type"),
        ({"type": "holder", "part": {"type": "other"}}, "holder.part.type"),
        ({"type": _OTHER}, "holder.type"),
    ],
    ids=["optional", "list", "dict", "lazy", "registered-elsewhere", "the-section-itself"],
)
def test_a_type_of_another_kind_is_refused_in_every_slot_form(config, key):
    with pytest.raises(ConfigurationError) as raised:
        _check_slot(config, _Holder, "holder", "archive.tar.gz (config.json)")
    message = str(raised.value)
    assert message.startswith("archive.tar.gz (config.json): ") and f"{key} is " in message
    assert "nothing was built" in message


def test_types_of_their_kind_pass_and_untyped_values_are_not_slots():
    _check_slot(
        {
            "type": "holder",
            "part": {"size": 3},  # the default implementation
            "parts": [{"type": "plain"}, {"type": f"{_MODULE}._PlainPart"}],
            "named": {"x": {"type": "plain"}},
            "later": {"type": "plain"},
            "anything": {"type": _OTHER},  # a plain dict: no kind to check
        },
        _Holder,
        "holder",
        "archive",
    )


def test_a_module_never_imported_is_not_imported_by_the_check():
    name = "elmoc_never_imported_module_for_a_test"
    _check_slot({"type": "holder", "part": {"type": f"{name}.Part"}}, _Holder, "holder", "archive")
    assert name not in sys.modules  # left to `check_config_types`, which refuses it


def test_every_built_section_has_its_kind():
    bilm = "elmoc_allennlp.models.bidirectional_language_model.BidirectionalLanguageModel"
    import elmoc_allennlp.models.bidirectional_language_model  # noqa: F401

    for section, kind in [
        ("dataset_reader", "DatasetReader"),
        ("validation_dataset_reader", "DatasetReader"),
        ("vocabulary", "Vocabulary"),
        ("data_loader", "DataLoader"),
        ("validation_data_loader", "DataLoader"),
        ("evaluation", "Evaluator"),
    ]:
        with pytest.raises(
            ConfigurationError, match=f"{section}.type is '{bilm}', which is not an? {kind}"
        ):
            check_section_kinds(
                {"model": {"type": "elmoc_bilm"}, section: {"type": bilm}}, "archive"
            )
    reader = "elmoc_allennlp.data.dataset_readers.lm_corpus_reader.LanguageModelCorpusReader"
    with pytest.raises(ConfigurationError, match="model.type .* which is not a Model"):
        check_section_kinds({"model": {"type": reader}}, "archive")
