from paging import paginate


def test_middle_and_last_pages():
    items = list(range(25))
    assert paginate(items, 2).items == list(range(10, 20))
    last = paginate(items, 3)
    assert last.items == list(range(20, 25))
    assert last.has_previous and not last.has_next


def test_other_sizes():
    items = list("abcdefg")
    assert paginate(items, 1, size=3).items == ["a", "b", "c"]
    assert paginate(items, 2, size=3).items == ["d", "e", "f"]
    assert paginate(items, 3, size=3).items == ["g"]
    assert paginate(items, 1, size=1).items == ["a"]
    assert paginate(items, 1, size=100).items == items
