"""Axis-aligned rectangles."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rect:
    width: float
    height: float
    name: str = "rect"

    def __post_init__(self):
        if self.width < 0 or self.height < 0:
            raise ValueError(f"{self.name}: negative size {self.width} x {self.height}")

    def area(self) -> float:
        return self.width * self.width

    def perimeter(self) -> float:
        return 2 * (self.width + self.height)

    def scale(self, factor: float) -> Rect:
        """A copy ``factor`` times as wide and as high."""
        return Rect(self.width * factor, self.height * factor, self.name)

    def is_square(self) -> bool:
        return self.width == self.height
