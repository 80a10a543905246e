"""Exceptions with one-line messages.

Every error a user can cause (bad files, wrong shapes, mismatched signatures) is raised as
one of these; the CLI prints ``str(err)`` on one line and exits non-zero, never a traceback.
"""

from __future__ import annotations


class UpdatescopeError(Exception):
    """Base class: a problem with the user's input, stated in one line."""


class InputError(UpdatescopeError, ValueError):
    """Bad input: wrong shape, NaN/inf, labels out of range, empty or unreadable files."""


class IncompatibleSignatureError(UpdatescopeError, ValueError):
    """Two sketches or signatures that cannot be combined or compared.

    The message names the field that differs and both values.
    """

    def __init__(self, field: str, left: object, right: object) -> None:
        self.field, self.left, self.right = field, left, right
        super().__init__(f"incompatible signatures: {field} differs ({left!r} vs {right!r})")


class SignatureFileError(UpdatescopeError, ValueError):
    """A signature file that is missing, truncated, corrupt, foreign or of a newer format."""


class MissingExtraError(UpdatescopeError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"this feature needs '{package}': install it with pip install 'updatescope[{extra}]'")
