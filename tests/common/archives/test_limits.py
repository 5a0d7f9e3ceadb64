"""The archive limits' variables (`limits.py`): one that is not a positive integer is named."""

import pytest

from allennlp.common.checks import ConfigurationError

from elmoc_allennlp.common.archives import archive_limit


@pytest.mark.parametrize("value", ["\u00b2", "9" * 5000, "-1", "0"])
def test_a_limit_variable_not_a_positive_integer_is_named(monkeypatch, value):
    monkeypatch.setenv("ELMOC_ARCHIVE_MAX_MEMBERS", value)
    with pytest.raises(ConfigurationError) as raised:
        archive_limit("ELMOC_ARCHIVE_MAX_MEMBERS")
    assert "ELMOC_ARCHIVE_MAX_MEMBERS" in str(raised.value)
    assert len(str(raised.value)) < 300
