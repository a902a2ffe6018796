from brackets import Mismatch, first_mismatch, is_balanced


def test_balanced_nested():
    assert is_balanced("f(a[0], {'k': (1, 2)})")
    assert is_balanced("")


def test_wrong_closer():
    assert first_mismatch("(a]") == Mismatch(2, "]", ")")


def test_unclosed_opener():
    assert first_mismatch("[1, (2") == Mismatch(6, "", ")")


def test_brackets_in_strings_ignored():
    assert is_balanced("print(')')")


def test_stray_closer():
    assert first_mismatch("a) + (b") == Mismatch(1, ")", "")
