import pytest

from paging import paginate


def test_first_page():
    page = paginate(list(range(25)), 1)
    assert page.items == list(range(10))
    assert page.pages == 3
    assert page.has_next and not page.has_previous


def test_empty_list_has_one_page():
    page = paginate([], 1)
    assert page.items == [] and page.pages == 1


def test_out_of_range():
    with pytest.raises(IndexError):
        paginate(list(range(5)), 2, size=5)


def test_bad_size():
    with pytest.raises(ValueError):
        paginate([1, 2], 1, size=0)
