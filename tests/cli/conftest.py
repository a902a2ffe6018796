"""The command line's tests: the tiny-model fixtures come from the runtime tests' conftest."""

from ..runtime.conftest import MESSAGES, tiny_dir, tiny_torch  # noqa: F401 - fixtures, re-exported
