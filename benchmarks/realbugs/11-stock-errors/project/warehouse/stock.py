"""Warehouse stock levels with reservations."""

from __future__ import annotations


class StockError(Exception):
    """Base class of the errors the stock raises."""


class UnknownItem(StockError, KeyError):
    """The SKU was never stocked."""


class OutOfStock(StockError):
    """Fewer items are available than were asked for."""

    def __init__(self, sku: str, wanted: int, available: int) -> None:
        super().__init__(f"{sku}: wanted {wanted}, only {available} available")
        self.sku, self.wanted, self.available = sku, wanted, available


class Stock:
    def __init__(self) -> None:
        self.levels: dict[str, int] = {}

    def receive(self, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self.levels[sku] = self.levels.get(sku, 0) + quantity

    def available(self, sku: str) -> int:
        if sku not in self.levels:
            raise UnknownItem(sku)
        return self.levels[sku]

    def take(self, sku: str, quantity: int) -> int:
        """Remove ``quantity`` items; returns what is left."""
        have = self.available(sku)
        if quantity > have:
            raise UnknownItem(sku, quantity, have)
        self.levels[sku] = have - quantity
        return self.levels[sku]

    def take_order(self, lines: dict[str, int]) -> None:
        """All lines or none: nothing is taken when one line cannot be served."""
        for sku, quantity in lines.items():
            if quantity > self.available(sku):
                raise OutOfStock(sku, quantity, self.available(sku))
        for sku, quantity in lines.items():
            self.take(sku, quantity)
