import pytest

from calc import CalcError, evaluate, tokenize


def test_token_positions_with_spaces():
    assert [(t.text, t.pos) for t in tokenize("  1 +\t22 ")] == [("1", 2), ("+", 4), ("22", 6)]


def test_blank_input_has_no_tokens():
    assert tokenize("   ") == []
    with pytest.raises(CalcError):
        evaluate(" ")


def test_spaces_everywhere():
    assert evaluate(" ( 1 + 2 ) * - 3 ") == -9
    assert evaluate("10 / 4 - 0.5") == 2


def test_error_position_after_spaces():
    with pytest.raises(CalcError, match="at 4"):
        evaluate("1 + ?")
