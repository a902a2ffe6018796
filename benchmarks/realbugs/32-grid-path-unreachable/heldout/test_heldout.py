from gridpath import distance, shortest_path


def test_start_is_goal():
    assert shortest_path(["S"], (0, 0), (0, 0)) == [(0, 0)]


def test_goal_inside_a_closed_room():
    grid = [
        ".....",
        ".###.",
        ".#G#.",
        ".###.",
    ]
    assert distance(grid, (0, 0), (2, 2)) is None
    assert distance(grid, (0, 0), (3, 4)) == 7


def test_single_cell_island():
    assert shortest_path(["#.#", "#.#"], (0, 1), (0, 0)) is None


def test_path_is_connected_and_shortest():
    grid = [".........", ".#######.", "........."]
    path = shortest_path(grid, (0, 0), (2, 8))
    assert len(path) == 11
    for (r1, c1), (r2, c2) in zip(path, path[1:]):
        assert abs(r1 - r2) + abs(c1 - c2) == 1
