from redact import mask, scrub


def test_mask_keeps_tail():
    assert mask("abcdef123456") == "********3456"


def test_mask_short_secret_fully_hidden():
    assert mask("abc") == "***"


def test_scrub_password_assignment():
    assert scrub("login user=ada password=hunter2 ok") == "login user=ada password=*** ok"


def test_scrub_api_key():
    assert scrub("auth with sk_live51HxQ2 failed") == "auth with sk_******HxQ2 failed"


def test_line_without_secrets_unchanged():
    assert scrub("GET /health 200 3ms") == "GET /health 200 3ms"
