from leaderboard.board import Leaderboard


def _board():
    board = Leaderboard()
    for player, score in [("eve", 12), ("ann", 30), ("bob", 30), ("cid", 5), ("dee", 44)]:
        board.submit(player, score)
    return board


def test_ranking_best_first_ties_by_name():
    assert _board().ranking() == [("dee", 44), ("ann", 30), ("bob", 30), ("eve", 12), ("cid", 5)]


def test_rank_of():
    board = _board()
    assert board.rank_of("dee") == 1
    assert board.rank_of("bob") == 3
    assert board.rank_of("cid") == 5


def test_new_best_moves_up():
    board = _board()
    assert board.submit("cid", 100)
    assert board.top(2) == ["cid", "dee"]
