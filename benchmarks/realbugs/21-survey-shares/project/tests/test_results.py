import pytest

from survey.results import percent, shares, winner


def test_percent():
    assert percent(1, 3) == 33.3
    assert percent(5, 0) == 0.0


def test_shares():
    answers = ["yes", "no", "yes", "yes"]
    assert shares(answers, ["yes", "no"]) == {"yes": 75.0, "no": 25.0}


def test_unknown_answer():
    with pytest.raises(ValueError):
        shares(["maybe"], ["yes", "no"])


def test_no_answers():
    assert winner([], ["a", "b"]) is None
