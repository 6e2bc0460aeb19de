"""Argument checks with clear errors naming the argument, and text sanitising.

The checks serve per-call arguments (a query text, a cosine threshold, a result count) and the fields of
:class:`~llama_index_carag.settings.CaragSettings` (its validators call them).  An estimator's own
parameters are checked by its scikit-learn ``_parameter_constraints``, not here.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number; got {type(value).__name__} {value!r}.")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must not be NaN.")
    return out


def check_interval(name: str, value: Any, low: float, high: float) -> float:
    """A number in ``[low, high]`` (``TypeError`` for a non-number, ``ValueError`` out of range or NaN)."""
    out = _real(name, value)
    if not low <= out <= high:
        raise ValueError(f"{name} must be in [{low:g}, {high:g}]; got {value!r}.")
    return out


def check_unit_interval(name: str, value: Any) -> float:
    """A number in ``[0, 1]``."""
    return check_interval(name, value, 0.0, 1.0)


def check_delta(value: Any, name: str = "delta") -> float:
    """``delta`` (SOI cosine threshold), or another cosine threshold, must lie in ``[-1, 1]``."""
    out = _real(name, value)
    if not -1.0 <= out <= 1.0:
        raise ValueError(f"{name} must be in [-1, 1] (a cosine similarity); got {value!r}.")
    return out


def check_count(value: Any, name: str) -> int:
    """A non-negative integer (a count that may be zero)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a non-negative integer; got {type(value).__name__} {value!r}.")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value!r}.")
    return int(value)


def check_top_k(value: Any, name: str = "similarity_top_k") -> int:
    """A positive integer number of results."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer; got {type(value).__name__} {value!r}.")
    if value < 1:
        raise ValueError(f"{name} must be >= 1; got {value}.")
    return int(value)


def check_n_clusters(value: Any) -> int | str:
    """A positive integer, or ``"auto"``."""
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"n_clusters must be a positive integer or 'auto'; got {value!r}.")
        return value
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"n_clusters must be a positive integer or 'auto'; got {type(value).__name__} {value!r}.")
    if value < 1:
        raise ValueError(f"n_clusters must be >= 1; got {value}.")
    return int(value)


def check_query_text(value: Any, name: str = "query") -> str:
    """A non-empty string (whitespace and NULs only is empty: what :func:`sanitize_text` leaves)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string; got {type(value).__name__}.")
    if not sanitize_text(value).strip():
        raise ValueError(f"{name} is empty; give the claim to check.")
    return value


def sanitize_text(text: str) -> str:
    """Text safe for tokenizers, JSON and files: NUL removed, lone surrogates replaced by U+FFFD.

    Everything else (RTL scripts, emoji, markup) is kept as is.
    """
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        text = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text


def normalize_text(text: str) -> str:
    """``text`` case-folded with its whitespace collapsed: the key under which texts are compared.

    Used to recognise a query as a corpus claim, for ``dedupe`` (one passage per distinct
    text) and for annotated recall by content.
    """
    return " ".join(str(text).split()).casefold()
