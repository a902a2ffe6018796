import pytest

from snapping import nearest, snap, snap_box, snap_to_grid


def test_snap_to_grid():
    assert snap_to_grid(13, 5) == 15
    assert snap_to_grid(12, 5) == 10
    with pytest.raises(ValueError):
        snap_to_grid(3, 0)


def test_nearest_below_all_candidates():
    assert nearest([10, 50, 90], 2) == 10


def test_nearest_between_candidates():
    assert nearest([10, 50, 90], 47) == 50


def test_guide_out_of_tolerance_falls_back_to_grid():
    assert snap(31, guides=[10], tolerance=4, step=8) == 32


def test_no_guides_no_grid():
    assert snap(17.5) == 17.5


def test_box_left_edge_snaps():
    assert snap_box(98, 40, guides=[100]) == 100
