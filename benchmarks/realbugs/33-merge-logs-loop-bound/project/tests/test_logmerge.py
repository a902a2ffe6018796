from logmerge import Entry, merge, merge_text, parse_line


def e(ts, source="api", message="ok"):
    return Entry(f"2024-03-04T10:{ts}", source, message)


def test_parse_line_keeps_message_spaces():
    assert parse_line("2024-03-04T10:15:00 api GET /users\n") == Entry("2024-03-04T10:15:00", "api", "GET /users")


def test_interleaved_logs():
    a = [e("00"), e("02"), e("04")]
    b = [e("01", "db"), e("03", "db"), e("05", "db")]
    assert merge(a, b) == sorted(a + b)


def test_empty_first_log():
    b = [e("01", "db"), e("02", "db")]
    assert merge([], b) == b


def test_second_log_shorter():
    a = [e("00"), e("02"), e("04"), e("06")]
    b = [e("03", "db")]
    assert merge(a, b) == [e("00"), e("02"), e("03", "db"), e("04"), e("06")]


def test_merge_text():
    first = "2024-03-04T10:00 api start\n\n2024-03-04T10:02 api stop\n"
    second = "2024-03-04T10:01 db connect\n"
    assert merge_text(first, second) == [
        "2024-03-04T10:00 api start",
        "2024-03-04T10:01 db connect",
        "2024-03-04T10:02 api stop",
    ]
