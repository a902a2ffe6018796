import pytest

from cardcheck import brand, check_digit, digits_of, is_valid


def test_digits_of_accepts_spaces_and_dashes():
    assert digits_of("4111-1111 1111-1111") == [4] + [1] * 15
    with pytest.raises(ValueError):
        digits_of("4111 abcd")


def test_valid_visa():
    assert is_valid("4111 1111 1111 1111")
    assert not is_valid("4111 1111 1111 1112")


def test_valid_amex():
    assert is_valid("3782 822463 10005")


def test_garbage_is_invalid():
    assert not is_valid("hello")
    assert not is_valid("0")


def test_check_digit_for_sixteen_digit_card():
    assert check_digit("411111111111111") == 1


def test_brand():
    assert brand("5555 5555 5555 4444") == "mastercard"
    assert brand("1234 5678 9012 3456") is None
