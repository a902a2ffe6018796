import math

from intmath import divisors, is_square, isqrt


def test_isqrt_matches_math_isqrt():
    for n in list(range(200)) + [10**12 - 1, 10**12, 2**61 + 12345]:
        assert isqrt(n) == math.isqrt(n), n


def test_huge_numbers_stay_exact():
    n = 10**40 + 7
    assert isqrt(n) == 10**20


def test_is_square():
    assert [n for n in range(50) if is_square(n)] == [0, 1, 4, 9, 16, 25, 36, 49]


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(97) == [1, 97]
