"""Tag statistics for a static blog's posts ({"title": ..., "tags": [...], "draft": bool})."""

from __future__ import annotations

from collections import Counter


def normalise(tag: str) -> str:
    return "-".join(tag.lower().split())


def all_tags(posts: list[dict]) -> list[str]:
    """Every tag of every published post, normalised, in order of appearance."""
    tags: list[str] = []
    for post in posts:
        if post.get("draft"):
            continue
        tags.extend([normalise(t) for t in post.get("tags", [])])
    return tags


def tag_cloud(posts: list[dict], limit: int = 10) -> list[tuple[str, int]]:
    """The ``limit`` most used tags with their counts, most used first, then by name."""
    counts = Counter(all_tags(posts))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]


def posts_tagged(posts: list[dict], tag: str) -> list[str]:
    wanted = normalise(tag)
    return [p["title"] for p in posts if not p.get("draft")
            and wanted in {normalise(t) for t in p.get("tags", [])}]
