from slugs import slugify, unique_slug


def test_spaces_and_hyphens_collapse():
    assert slugify("  a  -  b   c ") == "a-b-c"
    assert slugify("pre-existing hyphen") == "pre-existing-hyphen"


def test_max_length_cuts_at_a_word():
    assert slugify("one two three four", max_length=12) == "one-two"


def test_empty_title():
    assert unique_slug("!!!", set()) == "untitled"
    assert unique_slug("Two Words", {"two-words"}) == "two-words-2"
