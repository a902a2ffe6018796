from slugs import slugify, unique_slug


def test_single_word():
    assert slugify("Release") == "release"


def test_punctuation_and_accents():
    assert slugify("Héllo, World!") == "hello-world"


def test_unique_slug():
    assert unique_slug("News", {"news", "news-2"}) == "news-3"
