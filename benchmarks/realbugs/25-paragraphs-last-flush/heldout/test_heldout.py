from textblocks import paragraphs, summary, word_count


def test_single_line():
    assert paragraphs("just one line") == ["just one line"]


def test_empty_and_blank_text():
    assert paragraphs("") == []
    assert paragraphs("\n  \n\n") == []


def test_many_blank_lines_between_and_after():
    text = "\n\na\nb\n\n\n\nc\n   \nd e"
    assert paragraphs(text) == ["a b", "c", "d e"]


def test_word_count_counts_last_paragraph():
    assert word_count("one two\n\nthree four five") == 5


def test_summary_limit():
    text = "A. x\n\nB. y\n\nC. z\n\nD. w"
    assert summary(text) == ["A.", "B.", "C."]
    assert summary(text, limit=10) == ["A.", "B.", "C.", "D."]
