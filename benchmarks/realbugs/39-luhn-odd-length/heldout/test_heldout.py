from cardcheck import check_digit, is_valid


def test_known_valid_numbers_of_every_length():
    for number in ["371449635398431", "4222222222222", "6011111111111117", "30569309025904", "4000056655665556", "378734493671000"]:
        assert is_valid(number), number


def test_odd_length_corrupted_numbers_rejected():
    assert not is_valid("371449635398432")
    assert not is_valid("4222222222223")


def test_check_digit_for_odd_length_results():
    assert check_digit("37144963539843") == 1
    assert check_digit("422222222222") == 2
    assert check_digit("7992739871") == 3


def test_check_digit_round_trip():
    for partial in ["1", "12", "123", "12345678901234", "123456789012345"]:
        assert is_valid(partial.rjust(12, "0") + str(check_digit(partial.rjust(12, "0"))))
