from urlpath import breadcrumbs, join, parent, relative, segments


def test_segments_ignore_extra_slashes():
    assert segments("//docs///api/") == ["docs", "api"]
    assert segments("/") == []


def test_join():
    assert join(["docs", "api"]) == "/docs/api/"
    assert join([]) == "/"


def test_parent_of_top_level_section():
    assert parent("/blog/") == "/"


def test_parent_of_nested_page():
    assert parent("/docs/api/") == "/docs/"


def test_breadcrumbs():
    assert breadcrumbs("/docs/getting-started/") == [
        ("Home", "/"),
        ("Docs", "/docs/"),
        ("Getting started", "/docs/getting-started/"),
    ]


def test_relative_links():
    assert relative("/docs/api/", "/docs/guide/") == "../guide/"
    assert relative("/docs/", "/docs/") == "./"
