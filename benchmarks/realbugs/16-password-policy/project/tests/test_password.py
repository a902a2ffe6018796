from policy.password import Policy, strength


def test_good_password():
    assert Policy().accepts("correct horse 7 battery")


def test_reports_every_problem():
    assert Policy(need_symbol=True).problems("short") == [
        "shorter than 10 characters", "no digit", "no symbol"]


def test_minimum_length_is_enough():
    assert Policy(min_length=8).accepts("abcdefg1")


def test_strength():
    assert strength("") == 0
    assert strength("abc") == 1
