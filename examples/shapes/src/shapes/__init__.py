"""Rectangles and a text report about them."""

from .geometry import Rect
from .report import largest, summary

__all__ = ["Rect", "largest", "summary"]
