"""User text made safe for the figures: escaping for Plotly's pseudo-HTML, ``$`` escaping for Matplotlib, shortening.

Claims, passages and ids come from the open web: every user string is escaped
here, and only here, before the figure code adds its own ``<br>`` / ``<b>`` tags.
"""

from __future__ import annotations

import html
import math
import textwrap
from typing import Any

_HOVER_WRAP = 80
_HOVER_MAX_CHARS = 2000


def _safe(text: Any) -> str:
    """``str(text)`` without NULs and lone surrogates (fonts, JSON and files reject them)."""
    from llama_index_carag.core.validation import sanitize_text

    return sanitize_text(str(text))


def _shorten(text: Any, limit: int) -> str:
    """``str(text)`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(_safe(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def _html(raw: str) -> str:
    """Escape ``raw`` for Plotly's pseudo-HTML.

    ``html.escape`` (``&``, ``<``, ``>``) and then numeric entities for ``"``, ``'``
    and ``$``: Plotly decodes numeric entities but not ``&quot;``, and a string
    that starts and ends with ``$`` would otherwise be handed to MathJax.
    """
    return html.escape(raw, quote=False).translate(_NUMERIC_ENTITIES)


_NUMERIC_ENTITIES = str.maketrans({'"': "&#34;", "'": "&#39;", "$": "&#36;"})


def _esc(text: Any, limit: int | None = None) -> str:
    """HTML-escaped ``text`` (shortened to ``limit`` raw characters first), safe for Plotly."""
    raw = _safe(text) if limit is None else _shorten(text, limit)
    return _html(raw)


def _wrap_html(text: Any, width: int = _HOVER_WRAP, max_chars: int = _HOVER_MAX_CHARS) -> str:
    """Escape ``text`` and wrap it to ``width`` characters per line joined by ``<br>``.

    The raw text is wrapped first and every line escaped on its own, so an
    entity such as ``&lt;`` is never cut and the only tags are our ``<br>``.
    """
    raw = _shorten(text, max_chars)
    lines = textwrap.wrap(raw, width=width, break_long_words=True, break_on_hyphens=False) or [""]
    return "<br>".join(_html(line) for line in lines)


def _mpl_text(text: Any, limit: int | None = None) -> str:
    """``text`` for a Matplotlib label: shortened, ``$`` escaped so mathtext never triggers."""
    raw = _safe(text) if limit is None else _shorten(text, limit)
    # every "$" becomes "\$": no unescaped dollar is left, so Matplotlib renders it literally
    return raw.replace("$", r"\$")


def _mpl_wrapped(text: Any, width: int, max_lines: int) -> str:
    """``text`` for a Matplotlib label, wrapped to ``width`` characters a line, at most ``max_lines`` lines.

    Text beyond the last line is cut between words, with an ellipsis; ``$`` is escaped as in :func:`_mpl_text`.
    """
    raw = " ".join(_safe(text).split())
    lines = textwrap.wrap(raw, width=width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        last = lines[-1]
        if len(last) >= width:  # room for the ellipsis: drop the last word (or cut a word longer than a line)
            last = last.rsplit(" ", 1)[0] if " " in last else last[: width - 1]
        lines[-1] = last.rstrip() + "…"
    return _mpl_text("\n".join(lines))


def _mpl_title(text: Any, width_px: float, dpi: float, *, fontsize: float, max_lines: int = 2) -> str:
    """``text`` wrapped to the figure width (about 0.55 em per character), at most ``max_lines`` lines."""
    per_line = max(20, int(0.95 * width_px / (0.55 * fontsize * dpi / 72)))
    lines = textwrap.wrap(_shorten(text, per_line * max_lines), width=per_line) or [""]
    return _mpl_text("\n".join(lines[:max_lines]))


def _fmt_sim(value: float) -> str:
    """Similarity label: ``"0.87"``, or ``"n/a"`` when not finite."""
    return f"{value:.2f}" if math.isfinite(value) else "n/a"
