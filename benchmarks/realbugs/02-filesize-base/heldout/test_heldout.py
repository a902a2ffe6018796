from filesize import naturalsize, parse_size


def test_larger_units():
    assert naturalsize(1024) == "1.0 KiB"
    assert naturalsize(5 * 1024 ** 2) == "5.0 MiB"
    assert naturalsize(3 * 1024 ** 3 + 1024 ** 3 // 2, precision=2) == "3.50 GiB"
    assert naturalsize(1024 ** 5) == "1024.0 TiB"


def test_negative_and_just_below_a_unit():
    assert naturalsize(-2048) == "-2.0 KiB"
    assert naturalsize(1023) == "1023 B"


def test_round_trip():
    for size in (1536, 10 * 1024 ** 2, 7 * 1024 ** 3):
        assert parse_size(naturalsize(size)) == size
