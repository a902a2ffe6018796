from ringbuf import RingBuffer


def test_partly_filled():
    ring = RingBuffer(4)
    ring.push("x")
    ring.push("y")
    assert ring.items() == ["x", "y"]
    assert ring.last() == "y"


def test_exactly_full_and_wrapping():
    ring = RingBuffer(4)
    for i in range(4):
        ring.push(i)
    assert ring.items() == [0, 1, 2, 3]
    for i in range(4, 11):
        ring.push(i)
        assert ring.last() == i
    assert ring.items() == [7, 8, 9, 10]


def test_capacity_one_and_clear():
    ring = RingBuffer(1)
    ring.push("a")
    ring.push("b")
    assert ring.items() == ["b"]
    ring.clear()
    assert ring.items() == [] and len(ring) == 0
