"""A small stock ledger: goods are received and shipped on numbered days."""

from dataclasses import dataclass


class OutOfStock(Exception):
    """A shipment asked for more units than the ledger holds."""


@dataclass(frozen=True)
class Movement:
    day: int
    sku: str
    qty: int  # positive when received, negative when shipped


class Ledger:
    def __init__(self):
        self.movements = []

    def receive(self, day, sku, qty):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self.movements.append(Movement(day, sku, qty))

    def ship(self, day, sku, qty):
        if qty > self.level(sku):
            raise OutOfStock(f"{sku}: {qty} wanted, {self.level(sku)} in stock")
        self.movements.append(Movement(day, sku, -qty))

    def level(self, sku):
        """Units of ``sku`` in stock now."""
        return sum(m.qty for m in self.movements if m.sku == sku)

    def skus(self):
        return sorted({m.sku for m in self.movements})

    def daily_levels(self, sku, first_day, last_day):
        """Closing stock of ``sku`` on each day from ``first_day`` to ``last_day``, inclusive."""
        level = sum(m.qty for m in self.movements if m.sku == sku and m.day < first_day)
        levels = []
        for day in range(first_day, last_day):
            level += sum(m.qty for m in self.movements if m.sku == sku and m.day == day)
            levels.append(level)
        return levels

    def days_below(self, sku, threshold, first_day, last_day):
        """The days in the span whose closing stock was under ``threshold``."""
        levels = self.daily_levels(sku, first_day, last_day)
        return [first_day + i for i, level in enumerate(levels) if level < threshold]
