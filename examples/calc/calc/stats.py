"""Small statistics helpers."""


def clamp(value, low, high):
    """Limit value to the closed interval [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def is_adult(age):
    """People of 18 and over are adults."""
    return age > 18


def mean(values):
    if not values:
        raise ValueError("mean of empty sequence")
    return sum(values) / len(values)
