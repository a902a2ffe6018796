from blogtags.index import all_tags, tag_cloud

POSTS = [
    {"title": "a", "tags": ["x", "Y"]},
    {"title": "b", "tags": []},
    {"title": "c"},
    {"title": "d", "tags": ["y", "z", "x"]},
    {"title": "e", "tags": ["w"], "draft": True},
    {"title": "f", "tags": ["y"]},
]


def test_all_tags_flat():
    assert all_tags(POSTS) == ["x", "y", "y", "z", "x", "y"]
    assert all_tags([]) == []


def test_tag_cloud():
    assert tag_cloud(POSTS) == [("y", 3), ("x", 2), ("z", 1)]
    assert tag_cloud(POSTS, limit=1) == [("y", 3)]
