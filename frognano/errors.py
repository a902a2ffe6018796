"""Errors that end a command with a clear one-line message and a documented exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_UNFIXED = 1  # tests fail and no verified fix
EXIT_USAGE = 2  # usage or configuration error


class FrogNanoError(Exception):
    """An error the user can act on; ``str()`` is the one-line message."""

    exit_code = EXIT_USAGE
    status = "error"


class UsageError(FrogNanoError):
    """Bad path, bad settings, nothing to do: exit 2."""


class ProjectError(FrogNanoError):
    """The project's tests cannot run (syntax or collection error, broken interpreter): exit 1."""

    exit_code = EXIT_UNFIXED


class ApplyError(FrogNanoError):
    """A fix could not be written (files changed since, unwritable): exit 2, nothing written."""
