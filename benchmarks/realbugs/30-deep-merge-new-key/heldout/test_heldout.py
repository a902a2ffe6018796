from layered import deep_merge, layered


def test_new_top_level_key():
    assert deep_merge({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}


def test_new_nested_section():
    assert deep_merge({"db": {"host": "h"}}, {"db": {"pool": {"size": 3}}}) == {"db": {"host": "h", "pool": {"size": 3}}}


def test_merge_into_empty():
    assert deep_merge({}, {"x": {"y": 1}}) == {"x": {"y": 1}}


def test_dict_replaces_scalar_and_scalar_replaces_dict():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": 1}) == {"a": 1}


def test_overrides_only():
    assert layered(overrides=["a.b=1", "a.c=-2", "name=x"]) == {"a": {"b": 1, "c": -2}, "name": "x"}
