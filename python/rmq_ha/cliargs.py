"""argparse value types shared by the command lines: a bad value is a usage error (exit 2,
``argument --x: why``), never a traceback or a value that makes the command hang or spin."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(least: int) -> Callable[[str], int]:
    """A whole number of at least ``least``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"{n} is below {least}")
        return n

    return parse


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (a timeout of 0 or less fails every request)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(s) or s <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return s


def non_negative_number(text: str) -> float:
    """A finite number of at least 0 (a tolerance, a margin)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of at least 0")
    return x
