from policy.password import Policy, strength


def test_one_short_of_minimum():
    assert Policy(min_length=8).problems("abcdef1") == ["shorter than 8 characters"]


def test_exact_default_length():
    assert Policy().problems("abcdefghi1") == []


def test_common_password():
    assert "too common" in Policy(min_length=1, need_digit=False).problems("Password")


def test_strength_bonus():
    assert strength("Abcdefghijk1!") == 4
    assert strength("abcdefghijklmn") == 2
