from textfit import pad, row, truncate


def test_exact_width_unchanged():
    assert truncate("abcde", 5) == "abcde"


def test_cut_always_fits():
    for width in range(1, 12):
        assert len(truncate("x" * 20, width)) == width


def test_width_one():
    assert truncate("hello", 1) == "…"


def test_row():
    assert row(["name", "a long description"], [6, 8]) == "name   | a long …"
    assert pad("centre me please", 9, "center") == "centre m…"
