from blogtags.index import all_tags, normalise, posts_tagged

POSTS = [
    {"title": "Hello", "tags": ["Meta", "Intro"]},
    {"title": "Pytest tips", "tags": ["python", "Testing"]},
    {"title": "Unfinished", "tags": ["python"], "draft": True},
    {"title": "Typing", "tags": ["Python"]},
]


def test_normalise():
    assert normalise("  Machine  Learning ") == "machine-learning"


def test_all_tags():
    assert all_tags(POSTS) == ["meta", "intro", "python", "testing", "python"]


def test_posts_tagged():
    assert posts_tagged(POSTS, "PYTHON") == ["Pytest tips", "Typing"]
