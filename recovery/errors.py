"""Errors of eventual-checkpoint reconstruction and replay: recovery's part of the one
tree (:mod:`cec.errors`); all are :class:`~cec.errors.RecoveryError` s, exit status 4."""

from __future__ import annotations

from cec.errors import RecoveryError


class ExtentError(RecoveryError):
    """The log ended before N_c open windows were found (log trimmed or inconsistent)."""


class ReplayUnavailableError(RecoveryError):
    """The upstream log no longer holds the tuples after T (trimmed too far), or does
    not yet reach ``t_c`` (``short_of``: the seq it must reach)."""

    def __init__(self, message: str, *, short_of: int | None = None) -> None:
        super().__init__(message)
        self.short_of = short_of


class InconsistentLogError(ExtentError):
    """Output rows that break the log's invariants (order, types, columns, counts)."""
