import pytest

from intmath import divisors, gcd_all, is_square, isqrt, lcm_all


def test_isqrt_of_zero():
    assert isqrt(0) == 0


def test_isqrt_rounds_down():
    assert [isqrt(n) for n in (1, 8, 9, 10, 99)] == [1, 2, 3, 3, 9]


def test_isqrt_negative():
    with pytest.raises(ValueError):
        isqrt(-4)


def test_negative_is_not_square():
    assert not is_square(-9)


def test_gcd_and_lcm():
    assert gcd_all([12, 18, 30]) == 6
    assert lcm_all([4, 6, 10]) == 60


def test_divisors_of_twelve():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
