"""URL slugs for article titles."""

from __future__ import annotations

import re
import unicodedata


def slugify(title: str, max_length: int = 60) -> str:
    """"Héllo, World!" -> "hello-world"."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    text = re.sub(r"\s+", " ", text)
    text = text.replace("-", " ")
    text = re.sub(r"-{2,}", "-", text).strip("-")
    if len(text) > max_length:
        text = text[:max_length].rsplit("-", 1)[0]
    return text


def unique_slug(title: str, taken: set[str]) -> str:
    """A slug not in ``taken``: "post", "post-2", "post-3", ..."""
    base = slugify(title) or "untitled"
    slug, n = base, 2
    while slug in taken:
        slug = f"{base}-{n}"
        n += 1
    return slug
