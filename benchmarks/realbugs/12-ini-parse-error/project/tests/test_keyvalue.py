import pytest

from keyvalue import ParseError, parse


def test_sections():
    text = "name = demo\n[server]\nport = 80\n# comment\n\nhost=localhost\n"
    assert parse(text) == {"": {"name": "demo"}, "server": {"port": "80", "host": "localhost"}}


def test_value_may_contain_equals():
    assert parse("url = a=b")[""] == {"url": "a=b"}


def test_missing_equals():
    with pytest.raises(ParseError, match="line 2"):
        parse("[a]\njust words\n")


def test_empty_section():
    with pytest.raises(ParseError):
        parse("[ ]")
