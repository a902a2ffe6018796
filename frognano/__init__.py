"""FrogNano: failing pytest runs turned into verified patches, on your own machine."""

__version__ = "0.1.0"
