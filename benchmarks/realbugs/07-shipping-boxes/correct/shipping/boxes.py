"""Packing an order into shipping boxes and pricing it."""

from __future__ import annotations

import math

BOX_CAPACITY = {"small": 4, "medium": 10, "large": 24}
BOX_PRICE = {"small": 2.50, "medium": 4.00, "large": 7.50}


def boxes_needed(quantity: int, size: str) -> int:
    """Boxes of ``size`` needed to ship ``quantity`` items (a part-filled box still counts)."""
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    capacity = BOX_CAPACITY[size]
    return math.ceil(quantity / capacity)


def cheapest_packing(quantity: int) -> tuple[str, int, float]:
    """(size, boxes, cost) of the cheapest single-size packing; ties go to the smaller box."""
    options = []
    for size in BOX_CAPACITY:
        count = boxes_needed(quantity, size)
        options.append((count * BOX_PRICE[size], BOX_CAPACITY[size], size, count))
    cost, _, size, count = min(options)
    return size, count, round(cost, 2)
