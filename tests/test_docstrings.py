"""
Every parameter is documented where it is defined (issue #50, part 2): each registered component of
the plugin has, in allennlp's format, one `# Parameters` entry for each parameter of each of its
constructors the plugin defines (`__init__`, and the classmethod a registration names), with a
description, and no entry for a parameter that does not exist.

A named constructor's parameters are documented in its own docstring's `# Parameters` section
where it has one (`RnmtPlusLearningRate.from_run_length`), otherwise in the class's. A constructor
inherited from allennlp (or torch) is documented there; `*args` and `**kwargs` are not entries.
The public classes of `elmoc_allennlp.__all__` follow the same rule, and so does every other class
or function of the plugin whose docstring has a `# Parameters` section.
"""

import importlib
import inspect
import pkgutil
import re
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple

import pytest

import elmoc_allennlp
from allennlp.common.registrable import Registrable

PARAMETERS_HEADING = "# Parameters"
# allennlp's format: "name : `type`, optional (default = `value`)" at the section's indentation.
ENTRY = re.compile(r"^(?P<name>\S+) : (?P<type>\S.*)$")
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class Entry:
    def __init__(self, name: str, type_line: str, description: List[str]) -> None:
        self.name = name
        self.type_line = type_line
        self.description = description


def parameter_entries(docstring: Optional[str]) -> Optional[Dict[str, Entry]]:
    """
    The entries of the `# Parameters` section of `docstring` by name, or `None` without one. Raises
    `ValueError` for a line that is neither an entry nor an indented description, an entry without
    a description, and a name given twice.
    """
    lines = inspect.cleandoc(docstring or "").splitlines()
    if PARAMETERS_HEADING not in lines:
        return None
    section = lines[lines.index(PARAMETERS_HEADING) + 1 :]
    entries: Dict[str, Entry] = {}
    current: Optional[Entry] = None
    for line in section:
        if line.startswith("# "):  # the next section
            break
        if not line.strip():
            continue
        if line.startswith(" "):
            if current is None:
                raise ValueError(f"a description before any entry: {line!r}")
            current.description.append(line.strip())
            continue
        match = ENTRY.match(line)
        if match is None:
            raise ValueError(f"not an entry `name : type`: {line!r}")
        if match["name"] in entries:
            raise ValueError(f"{match['name']} is documented twice")
        current = entries[match["name"]] = Entry(match["name"], match["type"], [])
    for entry in entries.values():
        if not entry.description:
            raise ValueError(f"{entry.name} has no description")
    return entries


def _plugin_defined(cls: type, attribute: str) -> Optional[Callable]:
    """`cls.<attribute>` where the plugin defines it (in `cls` or a plugin base class), else `None`."""
    owner = next((klass for klass in cls.__mro__ if attribute in vars(klass)), None)
    if owner is None or not owner.__module__.startswith("elmoc_allennlp."):
        return None
    return getattr(cls, attribute)


def constructors(cls: type, named: Set[str]) -> Iterator[Tuple[str, Callable]]:
    for attribute in ["__init__", *sorted(named)]:
        function = _plugin_defined(cls, attribute)
        if function is not None:
            yield attribute, function


def documented_classes() -> Dict[type, Set[str]]:
    """Each registered plugin class and the named constructors its registrations use, and the
    classes of `elmoc_allennlp.__all__`."""
    classes: Dict[type, Set[str]] = {}
    for registry in Registrable._registry.values():
        for cls, constructor in registry.values():
            if cls.__module__.startswith("elmoc_allennlp."):
                classes.setdefault(cls, set()).update({constructor} - {None, "__init__"})
    for name in elmoc_allennlp.__all__:
        classes.setdefault(getattr(elmoc_allennlp, name), set())
    return classes


CLASSES = documented_classes()


def sectioned_definitions() -> Iterator[Tuple[str, Callable]]:
    """Every other class, and every function or method, of the plugin's modules whose docstring
    has a `# Parameters` section, with its dotted name."""
    for info in pkgutil.walk_packages(elmoc_allennlp.__path__, "elmoc_allennlp."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            members = [(name, value)]
            if inspect.isclass(value):
                members += [
                    (f"{name}.{attribute}", member) for attribute, member in vars(value).items()
                ]
            for qualified, member in members:
                member = getattr(member, "__func__", member)  # classmethods and staticmethods
                # its own docstring (`inspect.getdoc` would inherit allennlp's or torch's)
                own = inspect.cleandoc(getattr(member, "__doc__", None) or "")
                documented = PARAMETERS_HEADING in own.splitlines()
                if documented and member not in CLASSES and callable(member):
                    yield f"{module.__name__}.{qualified}", member


SECTIONED = dict(sectioned_definitions())


def _signature_parameters(function: Callable) -> Dict[str, inspect.Parameter]:
    """
    The parameters `function` itself names. A signature copied from elsewhere (a `__signature__`
    over `*args, **kwargs`) names parameters defined, and documented, where it is copied from.
    """
    code = getattr(function, "__func__", function).__code__
    own = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    parameters = list(inspect.signature(function).parameters.values())
    return {
        parameter.name: parameter
        for parameter in parameters
        if parameter.name in own
        and parameter.name not in ("self", "cls")
        and parameter.kind not in VARIADIC
    }


def documentation_problems(cls: type, named: Set[str]) -> List[str]:
    problems = []
    class_entries = parameter_entries(cls.__doc__) or {}
    expected_in_class: Dict[str, inspect.Parameter] = {}
    for attribute, function in constructors(cls, named):
        parameters = _signature_parameters(function)
        own = parameter_entries(function.__doc__) if attribute != "__init__" else None
        if own is None:
            expected_in_class.update(parameters)
            continue
        problems += _compare(f"{cls.__name__}.{attribute}", parameters, own)
    problems += _compare(cls.__name__, expected_in_class, class_entries)
    return problems


def _compare(
    where: str, parameters: Dict[str, inspect.Parameter], entries: Dict[str, Entry]
) -> List[str]:
    problems = [f"{where}: {name} is not documented" for name in parameters if name not in entries]
    problems += [
        f"{where}: documents {name}, which is not a parameter"
        for name in entries
        if name not in parameters
    ]
    for name in set(parameters) & set(entries):
        has_default = parameters[name].default is not inspect.Parameter.empty
        says_optional = "optional" in entries[name].type_line
        if has_default != says_optional:
            problems.append(
                f"{where}: {name} {'has' if has_default else 'has no'} default, but its entry "
                f"{'does not say' if has_default else 'says'} `optional`: {entries[name].type_line!r}"
            )
    return problems


def test_the_parser_reads_allennlps_format():
    docstring = """
    A class.

    # Parameters

    first : `int`
        What it is,
        on two lines.
    second : `str`, optional (default = `"a"`)
        Why `"a"`.

    # Returns

    nothing : `None`
    """
    entries = parameter_entries(docstring)
    assert sorted(entries) == ["first", "second"]
    assert entries["first"].description == ["What it is,", "on two lines."]
    assert entries["second"].type_line == '`str`, optional (default = `"a"`)'
    assert parameter_entries("No sections.") is None


@pytest.mark.parametrize(
    "section, problem",
    [
        ("first, second\n    Both as for `Other`.", "not an entry"),
        ("first : `int`\nsecond : `int`\n    Only this one described.", "first has no description"),
        ("first : `int`\n    One.\nfirst : `int`\n    Again.", "documented twice"),
    ],
)
def test_the_parser_refuses_grouped_undescribed_and_repeated_entries(section, problem):
    with pytest.raises(ValueError, match=problem):
        parameter_entries("Doc.\n\n# Parameters\n\n" + section)


def test_missing_extra_and_default_mismatched_entries_are_found():
    class Documented:
        """
        # Parameters

        size : `int`
            A size.
        rate : `float`
            Says required, but has a default.
        gone : `int`
            Not a parameter any more.
        """

        def __init__(self, size: int, rate: float = 0.5, other: int = 1, *args, **kwargs) -> None:
            pass

    Documented.__module__ = "elmoc_allennlp.example"
    assert sorted(documentation_problems(Documented, set())) == [
        "Documented: documents gone, which is not a parameter",
        "Documented: other is not documented",
        "Documented: rate has default, but its entry does not say `optional`: '`float`'",
    ]


def test_a_named_constructor_may_document_its_parameters_itself():
    class Built:
        """
        # Parameters

        size : `int`
            A size.
        """

        def __init__(self, size: int) -> None:
            pass

        @classmethod
        def from_other(cls, length: int) -> "Built":
            """
            # Parameters

            length : `int`
                A length.
            """
            return cls(length)

        @classmethod
        def from_undocumented(cls, width: int) -> "Built":
            return cls(width)

    Built.__module__ = "elmoc_allennlp.example"
    assert documentation_problems(Built, {"from_other"}) == []
    assert documentation_problems(Built, {"from_other", "from_undocumented"}) == [
        "Built: width is not documented"
    ]


def test_a_signature_copied_from_elsewhere_is_documented_there():
    class Base:
        def __init__(self, size: int) -> None:
            pass

    class Wrapper(Base):
        """No `# Parameters`: they are `Base`'s."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)

        __init__.__signature__ = inspect.signature(Base.__init__)

    class Undocumented(Wrapper):
        """No `# Parameters` either."""

        def __init__(self, size: int, *args, **kwargs) -> None:
            super().__init__(size, *args, **kwargs)

    for cls in (Wrapper, Undocumented):
        cls.__module__ = "elmoc_allennlp.example"
    assert list(inspect.signature(Wrapper).parameters) == ["size"]
    assert documentation_problems(Wrapper, set()) == []
    assert documentation_problems(Undocumented, set()) == ["Undocumented: size is not documented"]


def test_every_registered_kind_of_component_is_checked():
    kinds = {
        base.__name__
        for base, registry in Registrable._registry.items()
        for cls, _ in registry.values()
        if cls in CLASSES
    }
    assert {
        "TokenIndexer",
        "TokenEmbedder",
        "Seq2SeqEncoder",
        "Model",
        "DatasetReader",
        "DataLoader",
        "Trainer",
        "TrainerCallback",
        "LearningRateScheduler",
        "Predictor",
        "Subcommand",
    } <= kinds
    assert len(CLASSES) >= 30


@pytest.mark.parametrize(
    "cls", sorted(CLASSES, key=lambda cls: cls.__name__), ids=lambda cls: cls.__name__
)
def test_every_constructor_parameter_is_documented(cls):
    assert documentation_problems(cls, CLASSES[cls]) == []


def test_other_documented_classes_and_functions_are_found():
    assert {
        "elmoc_allennlp.fasttext.training.train_fasttext",
        "elmoc_allennlp.modules.seq2seq_encoders.layer_norm_lstm.LayerNormLstmLayer",
        "elmoc_allennlp.training.rnmt_plus_learning_rate.RnmtPlusLearningRate.from_run_length",
    } <= set(SECTIONED)


@pytest.mark.parametrize("name", sorted(SECTIONED))
def test_every_parameters_section_matches_its_signature(name):
    documented = SECTIONED[name]
    if inspect.isclass(documented):
        assert documentation_problems(documented, set()) == []
    else:
        entries = parameter_entries(documented.__doc__)
        assert _compare(name, _signature_parameters(documented), entries) == []
