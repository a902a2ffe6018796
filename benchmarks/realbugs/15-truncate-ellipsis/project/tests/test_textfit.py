import pytest

from textfit import pad, row, truncate


def test_short_text_unchanged():
    assert truncate("abc", 5) == "abc"


def test_long_text_is_cut():
    assert truncate("abcdefgh", 5) == "abcd…"


def test_pad():
    assert pad("ab", 4, "right") == "  ab"


def test_row_needs_widths():
    with pytest.raises(ValueError):
        row(["a", "b"], [3])
