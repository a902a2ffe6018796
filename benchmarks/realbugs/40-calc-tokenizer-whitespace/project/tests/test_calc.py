import pytest

from calc import CalcError, evaluate, tokenize


def test_tokenize_compact_expression():
    assert [t.text for t in tokenize("12*(3+4.5)")] == ["12", "*", "(", "3", "+", "4.5", ")"]


def test_precedence():
    assert evaluate("2+3*4") == 14
    assert evaluate("(2+3)*4") == 20


def test_unary_minus_and_division():
    assert evaluate("-8/(1-3)") == 4


def test_spaces_are_allowed():
    assert evaluate("2 * (3 + 4.5)") == 15


def test_errors():
    with pytest.raises(CalcError):
        evaluate("1/0")
    with pytest.raises(CalcError):
        evaluate("2+")
    with pytest.raises(CalcError):
        evaluate("2$3")
