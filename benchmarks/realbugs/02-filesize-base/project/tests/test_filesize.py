import pytest

from filesize import naturalsize, parse_size


def test_bytes():
    assert naturalsize(0) == "0 B"
    assert naturalsize(1000) == "1000 B"


def test_kibibytes():
    assert naturalsize(1536) == "1.5 KiB"


def test_mebibytes():
    assert naturalsize(3 * 1024 ** 2) == "3.0 MiB"


def test_parse_size():
    assert parse_size("2 KiB") == 2048
    assert parse_size("512") == 512


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError):
        parse_size("lots")
