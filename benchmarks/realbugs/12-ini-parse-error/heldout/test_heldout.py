import pytest

from keyvalue import ParseError, parse


def test_error_carries_line_number():
    with pytest.raises(ParseError) as info:
        parse("a = 1\n\n# x\nbroken\n")
    assert info.value.lineno == 4


def test_empty_key():
    with pytest.raises(ParseError, match="empty key"):
        parse(" = 3")


def test_empty_value_is_allowed():
    assert parse("k =")[""] == {"k": ""}


def test_repeated_section_merges():
    assert parse("[s]\na=1\n[t]\n[s]\nb=2")["s"] == {"a": "1", "b": "2"}
