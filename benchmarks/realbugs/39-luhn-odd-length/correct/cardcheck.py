"""Client-side card number checks for a checkout form: Luhn checksum and card brand."""

from __future__ import annotations

BRANDS = (
    ("amex", ("34", "37"), (15,)),
    ("visa", ("4",), (13, 16, 19)),
    ("mastercard", ("51", "52", "53", "54", "55"), (16,)),
)


def digits_of(number: str) -> list[int]:
    """The digits of a number typed with optional spaces or dashes."""
    cleaned = number.replace(" ", "").replace("-", "")
    if not cleaned.isdigit():
        raise ValueError(f"not a card number: {number!r}")
    return [int(ch) for ch in cleaned]


def luhn_total(digits: list[int]) -> int:
    total = sum(digits[-1::-2])
    for digit in digits[-2::-2]:
        doubled = digit * 2
        total += doubled - 9 if doubled > 9 else doubled
    return total


def is_valid(number: str) -> bool:
    try:
        digits = digits_of(number)
    except ValueError:
        return False
    return 12 <= len(digits) <= 19 and luhn_total(digits) % 10 == 0


def check_digit(partial: str) -> int:
    """The digit that makes ``partial`` + digit pass the Luhn check."""
    return (10 - luhn_total(digits_of(partial) + [0]) % 10) % 10


def brand(number: str) -> str | None:
    digits = "".join(map(str, digits_of(number)))
    for name, prefixes, lengths in BRANDS:
        if digits.startswith(prefixes) and len(digits) in lengths:
            return name
    return None
