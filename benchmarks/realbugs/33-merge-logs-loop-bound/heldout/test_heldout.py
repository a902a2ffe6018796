from logmerge import Entry, merge


def e(ts, source="api"):
    return Entry(f"2024-03-04T10:{ts:02d}", source, "m")


def test_second_log_longer():
    a = [e(5)]
    b = [e(1, "db"), e(2, "db"), e(7, "db"), e(9, "db")]
    assert merge(a, b) == [e(1, "db"), e(2, "db"), e(5), e(7, "db"), e(9, "db")]


def test_empty_second_log():
    a = [e(1), e(2)]
    assert merge(a, []) == a
    assert merge([], []) == []


def test_ties_keep_first_log_first():
    assert merge([e(1, "api")], [e(1, "db")]) == [e(1, "api"), e(1, "db")]


def test_many_lengths():
    for n in range(6):
        for m in range(6):
            a = [e(2 * k) for k in range(n)]
            b = [e(2 * k + 1, "db") for k in range(m)]
            assert merge(a, b) == sorted(a + b, key=lambda x: x.timestamp)
