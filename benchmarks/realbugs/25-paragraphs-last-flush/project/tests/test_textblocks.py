from textblocks import first_sentence, paragraphs, summary

MESSAGE = """Fix the login redirect.

The session cookie was dropped when the
redirect crossed subdomains.
"""


def test_paragraphs_joins_wrapped_lines():
    assert paragraphs(MESSAGE) == [
        "Fix the login redirect.",
        "The session cookie was dropped when the redirect crossed subdomains.",
    ]


def test_paragraphs_without_trailing_newline():
    assert paragraphs("Title\n\nBody line one\nline two") == ["Title", "Body line one line two"]


def test_first_sentence():
    assert first_sentence("It works. Mostly!") == "It works."


def test_summary_of_message():
    assert summary(MESSAGE) == ["Fix the login redirect.", "The session cookie was dropped when the redirect crossed subdomains."]


def test_paragraphs_skip_surrounding_blank_lines():
    assert paragraphs("\n\n  Dear team,\n\nThanks!\n\n") == ["Dear team,", "Thanks!"]
