from reqs.reader import pins, significant_lines


def test_only_comments_and_blanks():
    assert significant_lines("\n# a\n   # b\n\n") == []


def test_indented_comment_and_extras():
    text = "  # tools\nblack[jupyter]==24.1.0\nMy_Package == 1.2\n"
    assert pins(text) == {"black": "24.1.0", "my-package": "1.2"}


def test_hash_inside_a_line_is_kept():
    assert significant_lines("pkg @ https://x.org/p.whl#sha256=ab") == ["pkg @ https://x.org/p.whl#sha256=ab"]
