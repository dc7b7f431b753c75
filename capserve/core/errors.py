"""The one error hierarchy: every failure is either worth retrying later or never worth retrying.

SDK errors (botocore, kubernetes, huggingface_hub, httpx) are converted at the task boundary with
``raise ... from exc``; the message names the resource and what to change. Messages never carry
secrets.
"""

from __future__ import annotations

import difflib


class CapserveError(Exception):
    """Base class for every error capserve raises on purpose."""


class RetryableError(CapserveError):
    """Transient: throttling, 5xx, connection reset. Retrying with backoff may succeed."""


class PermanentError(CapserveError):
    """Retrying cannot help: bad input, missing permission, no capacity. The message says what to change."""


class SpecError(PermanentError):
    """A campaign spec (or a CLI argument standing in for one) is invalid."""


class UnknownCatalogEntryError(PermanentError, KeyError):
    """A model, GPU or instance type that the catalog does not know."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        near = difflib.get_close_matches(name.lower(), self.known, n=1, cutoff=0.75)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        super().__init__(f"unknown {kind} {name!r}{hint}; known: {', '.join(self.known)}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class DoesNotFitError(PermanentError):
    """The planner refuses a model × hardware × context combination, saying by how much."""


class DeadlineError(PermanentError):
    """Not enough of the paid window is left to make a step worthwhile."""


class ClusterGoneError(PermanentError):
    """The cluster a wait was watching was deleted (or is being deleted) under it: nothing there can become ready."""


class WaitTimeoutError(PermanentError):
    """A wait ran out of the time its caller gave it; the message says what was still missing.

    Every wait in capserve raises this one class when its deadline passes. It is not retried by the task
    decorators: a retry would start the wait again and wait longer than the caller asked (re-running the
    stage picks the wait up, with a fresh budget chosen by a person or a schedule).
    """


class OfferGoneError(PermanentError):
    """The chosen offering no longer exists at purchase (someone else bought it, or it was withdrawn): nothing was
    bought, and the acquire stage may search again."""
