from redact import mask, scrub


def test_mask_other_keep_and_fill():
    assert mask("0123456789", keep=2) == "********89"
    assert mask("0123456789", keep=6, fill="#") == "####456789"
    assert mask("secret", keep=0) == "******"


def test_mask_length_equal_to_keep():
    assert mask("abcd") == "****"
    assert mask("abcde") == "*bcde"


def test_scrub_card_number():
    assert scrub("card 4111 1111 1111 1234 declined") == "card ************1234 declined"


def test_scrub_two_keys():
    assert scrub("pk_AAAA1111 then tok_ZZZZ98765") == "pk_****1111 then tok_*****8765"
