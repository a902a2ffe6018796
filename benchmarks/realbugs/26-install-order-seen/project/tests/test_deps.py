import pytest

from deps import UnknownPackage, dependents, install_order

REQUIRES = {
    "app": ["web", "orm"],
    "web": ["http"],
    "orm": ["db-driver"],
    "http": [],
    "db-driver": [],
}


def test_chain_dependencies_first():
    assert install_order(REQUIRES, ["web"]) == ["http", "web"]


def test_full_application():
    assert install_order(REQUIRES, ["app"]) == ["db-driver", "orm", "http", "web", "app"]


def test_shared_dependency_installed_once():
    requires = {"cli": ["click", "core"], "core": ["click"], "click": []}
    assert install_order(requires, ["cli"]) == ["click", "core", "cli"]


def test_unknown_target():
    with pytest.raises(UnknownPackage):
        install_order(REQUIRES, ["nope"])


def test_dependents():
    assert dependents(REQUIRES, "http") == {"web"}
