"""cec: continuous eventual checkpointing for windowed stream operators."""

from cec.errors import CecError

__all__ = ["CecError"]
__version__ = "0.1.0"
