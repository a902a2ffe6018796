from urlpath import parent


def test_parent_of_root_is_root():
    assert parent("/") == "/"
    assert parent("") == "/"


def test_parent_of_deep_page():
    assert parent("/docs/api/v2/users/") == "/docs/api/v2/"
    assert parent("/a/b/c") == "/a/b/"


def test_repeated_parent_walks_to_root():
    path = "/blog/2024/03/hello-world/"
    seen = []
    while path != "/":
        path = parent(path)
        seen.append(path)
    assert seen == ["/blog/2024/03/", "/blog/2024/", "/blog/", "/"]


def test_parent_with_repeated_names():
    assert parent("/x/x/y/") == "/x/x/"
