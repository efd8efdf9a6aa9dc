"""Placeholders in scenario strings, expanded per run.

``{{faker:PROVIDER}}`` becomes a value from a Faker seeded from the run seed (same seed, same
values, in the same order of expansion); ``{{sha256:PATH}}`` becomes ``"sha256:<hex>"`` of
the initial content of a file of the fake filesystem (the form file-edit preconditions use).

Guarantees: expansion is deterministic and never touches Faker's global state (one seeded
instance per run); :func:`check` reports every malformed or unknown placeholder at load time so
that a run never fails on one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from faker import Faker

PLACEHOLDER = re.compile(r"\{\{\s*([a-z0-9_]+)\s*:\s*([^{}]*?)\s*\}\}")
_LOOSE = re.compile(r"\{\{.*?\}\}")
KINDS = ("faker", "sha256")


def file_sha256(content: str) -> str:
    """The precondition digest of a fake file's content (what ``expect_sha`` compares to)."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


FAKER_PROVIDERS: frozenset[str] = frozenset("""
    address bs catch_phrase city color_name company company_email country country_code
    credit_card_number currency_code domain_name domain_word ean13 email file_extension
    file_name file_path first_name free_email hex_color hostname iban ipv4 ipv6 isbn13 job
    language_code last_name license_plate mac_address md5 mime_type name paragraph password
    phone_number postcode safe_email sentence sha1 sha256 slug ssn street_address street_name
    text uri uri_path url user_name uuid4 word
""".split())
"""The Faker providers a ``{{faker:...}}`` placeholder may name (documented in
``docs/scenarios.md``, "Placeholders"): each is callable without arguments, needs no optional
package, returns a short string, and depends on the seed alone (date and time providers read
the wall clock, so they are left out). An allow-list, not Faker's own catalogue: a provider
that takes arguments (``enum``) or an optional package (``xml``, ``image``) would pass a
name check and fail at every run."""


def faker_providers() -> frozenset[str]:
    """The providers ``{{faker:...}}`` may name (:data:`FAKER_PROVIDERS`)."""
    return FAKER_PROVIDERS


def check(text: str, files: Mapping[str, str] | None = None) -> list[str]:
    """Problems with the placeholders in ``text`` (empty when all are valid)."""
    files = files or {}
    problems = []
    for loose in _LOOSE.finditer(text):
        match = PLACEHOLDER.fullmatch(loose.group(0))
        if match is None:
            problems.append(f"malformed placeholder {loose.group(0)!r} (use {{{{faker:PROVIDER}}}} "
                            "or {{sha256:/path}})")
            continue
        kind, arg = match.groups()
        if kind == "faker":
            if arg not in faker_providers():
                problems.append(f"unknown Faker provider {arg!r} in {loose.group(0)!r}: not on "
                                f"the allow-list (valid: {', '.join(sorted(FAKER_PROVIDERS))})")
        elif kind == "sha256":
            if arg not in files:
                valid = ", ".join(sorted(files)) or "none declared in [files]"
                problems.append(f"{{{{sha256:{arg}}}}} names no initial file (valid: {valid})")
        else:
            problems.append(f"unknown placeholder kind {kind!r} in {loose.group(0)!r} "
                            f"(valid: {', '.join(KINDS)})")
    return problems


class Templates:
    """Expands placeholders for one run; keep one instance per run (expansion order matters)."""

    def __init__(self, seed: int, files: Mapping[str, str] | None = None) -> None:
        # Faker is built at the first {{faker:...}} (building one costs ~10 ms, and most
        # scenarios have none); it is seeded then, before any draw, so the texts are the same.
        self._seed = seed
        self._faker_instance: Faker | None = None
        self._files = dict(files or {})

    @property
    def _faker(self) -> Faker:
        if self._faker_instance is None:
            self._faker_instance = Faker()
            self._faker_instance.seed_instance(self._seed)
        return self._faker_instance

    def set_files(self, files: Mapping[str, str]) -> None:
        """The initial files ``{{sha256:...}}`` refers to (already expanded)."""
        self._files = dict(files)

    def expand(self, value: Any) -> Any:
        """``value`` with every placeholder in every string (recursively) replaced."""
        if isinstance(value, str):
            if "{{" not in value:
                return value
            return PLACEHOLDER.sub(self._one, value)
        if isinstance(value, dict):
            return {key: self.expand(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.expand(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.expand(item) for item in value)
        return value

    def _one(self, match: re.Match[str]) -> str:
        kind, arg = match.groups()
        if kind == "faker":
            if arg not in FAKER_PROVIDERS:
                raise KeyError(f"{{{{faker:{arg}}}}}: not an allowed Faker provider")
            return str(getattr(self._faker, arg)())
        if kind == "sha256":
            if arg not in self._files:
                raise KeyError(f"{{{{sha256:{arg}}}}}: no such initial file")
            return file_sha256(self._files[arg])
        raise KeyError(f"unknown placeholder kind {kind!r}")
