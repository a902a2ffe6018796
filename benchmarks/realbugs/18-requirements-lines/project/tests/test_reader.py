from reqs.reader import canonical, pins, significant_lines

TEXT = """
# web
Flask==3.0.2  # pinned for the session fix
requests>=2.31

-r dev.txt
"""


def test_canonical():
    assert canonical("Zope.Interface") == "zope-interface"


def test_significant_lines():
    assert significant_lines(TEXT) == ["Flask==3.0.2", "requests>=2.31", "-r dev.txt"]


def test_pins():
    assert pins(TEXT) == {"flask": "3.0.2", "requests": None}
