import pytest

from snapping import nearest, snap, snap_box


def test_nearest_above_all_candidates():
    assert nearest([10, 50, 90], 200) == 90


def test_nearest_ties_pick_the_earlier():
    assert nearest([10, 20], 15) == 10
    assert nearest([20, 10], 15) == 20


def test_nearest_unsorted_and_negative():
    assert nearest([-30, 5, -8, 40], -10) == -8
    assert nearest([3.5], -100) == 3.5


def test_nearest_empty():
    with pytest.raises(ValueError):
        nearest([], 1)


def test_snap_picks_closest_guide_in_tolerance():
    assert snap(63, guides=[0, 60, 120, 65]) == 65
    assert snap(118, guides=[0, 60, 120]) == 120


def test_box_right_edge_snaps():
    assert snap_box(57, 40, guides=[0, 100, 200]) == 60
