"""The one exception the config layer raises, and how it prints.

An operator who mistypes the config file should see exactly one line saying which file, which key
and what is wrong, e.g.::

    config error in kqp.yaml: quotas.entities[1].producer_byte_rate: must be a non-negative number, got 'fast'

The CLI prints ``str(error)`` and exits 2, so the whole message lives in ``__str__``. Validation code
deep in a section does not know the file name; the loader adds it on the way out with
:meth:`ConfigError.with_source`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_MAX_SHOWN_VALUE = 60


class ConfigError(Exception):
    """A refused configuration: ``key`` is the dotted key path ("" for whole-file errors)."""

    def __init__(self, key: str, message: str, source: str | None = None) -> None:
        super().__init__(key, message, source)
        self.key = key
        # Whatever a message quotes (YAML problems, OS errors), the printed form stays on one line.
        self.message = _one_line(message)
        self.source = source

    def with_source(self, source: str | None) -> ConfigError:
        """The same error, attributed to ``source`` (a file name or a CLI flag)."""
        return ConfigError(self.key, self.message, source)

    def __str__(self) -> str:
        where = f"config error in {self.source}" if self.source else "config error"
        if self.key:
            return f"{where}: {self.key}: {self.message}"
        return f"{where}: {self.message}"


def shown(value: object) -> str:
    """``value`` as it should appear after "got": a container by its kind, a scalar by its repr."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = repr(value)
    if len(text) > _MAX_SHOWN_VALUE:
        text = text[: _MAX_SHOWN_VALUE - 3] + "..."
    return text


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
