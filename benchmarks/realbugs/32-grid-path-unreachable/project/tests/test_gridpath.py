from gridpath import distance, find, neighbours, shortest_path

FLOOR = [
    "S..#....",
    ".#.#.##.",
    ".#...#G.",
    "...#....",
]


def test_find_marks():
    assert find(FLOOR, "S") == (0, 0)
    assert find(FLOOR, "G") == (2, 6)


def test_neighbours_skip_walls_and_edges():
    assert sorted(neighbours(FLOOR, (0, 0))) == [(0, 1), (1, 0)]


def test_distance_around_walls():
    assert distance(FLOOR, find(FLOOR, "S"), find(FLOOR, "G")) == 10


def test_path_ends_at_goal():
    path = shortest_path(FLOOR, (0, 0), (0, 2))
    assert path == [(0, 0), (0, 1), (0, 2)]


def test_walled_off_goal():
    grid = ["S.#G", "..#."]
    assert shortest_path(grid, find(grid, "S"), find(grid, "G")) is None
