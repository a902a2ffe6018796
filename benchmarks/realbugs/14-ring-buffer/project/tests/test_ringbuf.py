import pytest

from ringbuf import RingBuffer


def test_keeps_most_recent():
    ring = RingBuffer(3)
    for line in "abcde":
        ring.push(line)
    assert ring.items() == ["c", "d", "e"]
    assert len(ring) == 3


def test_last():
    ring = RingBuffer(2)
    ring.push(1)
    assert ring.last() == 1


def test_empty():
    with pytest.raises(IndexError):
        RingBuffer(2).last()
