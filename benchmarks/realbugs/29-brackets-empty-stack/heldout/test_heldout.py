from brackets import Mismatch, first_mismatch, is_balanced


def test_closer_first():
    assert first_mismatch(")") == Mismatch(0, ")", "")
    assert first_mismatch("}{") == Mismatch(0, "}", "")


def test_stray_closer_after_balanced_group():
    assert first_mismatch("(a)]") == Mismatch(3, "]", "")
    assert not is_balanced("[x]]")


def test_deep_nesting():
    assert is_balanced("{[(" * 50 + ")]}" * 50)
    assert first_mismatch("{[()]}}") == Mismatch(6, "}", "")


def test_quotes():
    assert is_balanced('x = ("]", "[")')
    assert first_mismatch("')' )") == Mismatch(4, ")", "")
