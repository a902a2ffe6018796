from deps import install_order

DIAMOND = {"top": ["left", "right"], "left": ["base"], "right": ["base"], "base": []}


def test_diamond():
    assert install_order(DIAMOND, ["top"]) == ["base", "left", "right", "top"]


def test_several_targets_share_dependencies():
    assert install_order(DIAMOND, ["left", "right"]) == ["base", "left", "right"]
    assert install_order(DIAMOND, ["top", "left"]) == ["base", "left", "right", "top"]


def test_cycle_is_broken():
    requires = {"a": ["b"], "b": ["c"], "c": ["a"]}
    assert install_order(requires, ["a"]) == ["c", "b", "a"]


def test_self_dependency():
    assert install_order({"x": ["x"]}, ["x"]) == ["x"]


def test_each_package_once_in_deep_graph():
    requires = {f"p{i}": [f"p{j}" for j in range(i)] for i in range(12)}
    order = install_order(requires, ["p11"])
    assert order == [f"p{i}" for i in range(12)]
