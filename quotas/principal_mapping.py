r"""Kafka's `ssl.principal.mapping.rules`: from a client certificate's distinguished name to a user.

For a TLS client Kafka takes its certificate's subject, rendered as RFC 2253
(`CN=alice,OU=eng,O=Acme,C=US`), through these rules (Kafka's `SslPrincipalMapper`, read for its
semantics): ``DEFAULT`` keeps the name; ``RULE:pattern/replacement/`` applies when `pattern` matches
the *whole* name and replaces every match (Java's `String.replaceAll`), a trailing ``L`` or ``U``
lower- or upper-casing the result; the first rule that applies wins, and none refuses the client.

Rules are written as Kafka writes them: `\` escapes in both parts, a reference to a missing group is
literal text, `\w`, `\d`, `\s` and case folding are ASCII, and ``(?<name>...)`` is accepted. Every
rule is checked when the config loads, so a handshake never meets a broken rule. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["DEFAULT_RULES", "NoMatchingRule", "PrincipalMapper", "Rule", "RuleError", "parse_rules"]

DEFAULT_RULES = ("DEFAULT",)   # Kafka's default for ssl.principal.mapping.rules

# Kafka's grammar of one rule, and of a comma-separated list of them: a part is any run of
# escaped characters and characters other than "\" and "/"; the case flag ends the rule.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z])")


class RuleError(ValueError):
    """A rule that cannot be parsed or compiled; the message says which and why."""


class NoMatchingRule(LookupError):   # Kafka's name for it
    """No rule applies to a distinguished name: Kafka refuses such a connection."""


# A replacement is compiled into literal text and group references (int or name).
_Piece = str | int


@dataclass(frozen=True)
class Rule:
    """One rule. ``pattern`` None is ``DEFAULT``; ``case`` is "", "L" or "U"."""

    pattern: str | None = None
    replacement: str = ""
    case: str = ""
    _regex: re.Pattern[str] | None = field(default=None, repr=False, compare=False)
    _pieces: tuple[_Piece, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def compile(cls, pattern: str, replacement: str, case: str) -> Rule:
        try:
            regex = re.compile(_NAMED_GROUP.sub("(?P<", pattern), re.ASCII)
        except re.error as exc:
            raise RuleError(f"RULE:{pattern}/{replacement}/{case}: the pattern is not a regular expression: "
                            f"{exc}") from None
        pieces = _replacement_pieces(replacement, regex)
        return cls(pattern, replacement, case, regex, pieces)

    @property
    def is_default(self) -> bool:
        return self.pattern is None

    def apply(self, name: str) -> str | None:
        """The mapped name, or None when the rule does not apply to ``name``."""
        if self._regex is None:
            return name
        if self._regex.fullmatch(name) is None:
            return None
        result = self._regex.sub(self._expand, name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in self._pieces)

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern}/{self.replacement}/{self.case}"


@dataclass(frozen=True)
class PrincipalMapper:
    """An ordered list of rules; :meth:`name` maps a distinguished name to a user."""

    rules: tuple[Rule, ...]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no principal mapping rule applies to {distinguished_name!r}")

    def __str__(self) -> str:
        return "[" + ", ".join(str(rule) for rule in self.rules) + "]"


def parse_rules(rules: str | Sequence[str]) -> PrincipalMapper:
    """Rules from Kafka's one-string form (``"RULE:.../.../L, DEFAULT"``) or a list of such strings
    (each may itself hold several, comma-separated). Empty rules are ignored, as Kafka ignores them;
    anything else that is not a rule raises :class:`RuleError`."""
    texts = [rules] if isinstance(rules, str) else list(rules)
    return PrincipalMapper(tuple(_parse_one(text) for whole in texts for text in _split(whole)
                                 if text))


def _split(rules: str) -> Iterable[str]:
    for match in _SPLITTER.finditer(rules.strip()):
        yield match.group(1)


def _parse_one(text: str) -> Rule:
    match = _PARSER.match(text)
    if match is None or match.end() != len(text):
        rest = text[match.end():] if match is not None else text
        hint = " (a rule is DEFAULT or RULE:pattern/replacement/ with an optional L or U after it)"
        raise RuleError(f"invalid rule {text!r}: cannot read {rest!r}{hint}")
    if match.group(1) is not None:
        return Rule()
    return Rule.compile(match.group(2), match.group(3), match.group(4))


def _replacement_pieces(replacement: str, regex: re.Pattern[str]) -> tuple[_Piece, ...]:
    """A Java replacement string read as Java's `Matcher.appendReplacement` reads it, with Kafka's
    one amendment: a numbered reference beyond the pattern's groups is literal text (when the
    pattern has any group; with none, Java fails on it, so it is refused here, before use)."""
    groups = regex.groups
    pieces: list[_Piece] = []
    text: list[str] = []
    i = 0

    def fail(why: str) -> RuleError:
        return RuleError(f"replacement {replacement!r}: {why}")

    while i < len(replacement):
        c = replacement[i]
        if c == "\\":
            if i + 1 == len(replacement):
                raise fail("a trailing \\ escapes nothing")
            text.append(replacement[i + 1])
            i += 2
            continue
        if c != "$":
            text.append(c)
            i += 1
            continue
        if i + 1 == len(replacement):
            raise fail("a $ at the end names no group")
        if replacement[i + 1] == "{":
            end = replacement.find("}", i + 2)
            group_name = replacement[i + 2:end] if end > 0 else ""
            if end < 0 or group_name not in regex.groupindex:
                raise fail(f"no group named {group_name!r} in the pattern")
            reference: _Piece = regex.groupindex[group_name]
            i = end + 1
        elif replacement[i + 1].isascii() and replacement[i + 1].isdigit():
            # Java takes the first digit whatever it is, then more digits while the number stays a group.
            number, i = int(replacement[i + 1]), i + 2
            while i < len(replacement) and replacement[i].isascii() and replacement[i].isdigit():
                longer = number * 10 + int(replacement[i])
                if longer > groups:
                    break
                number, i = longer, i + 1
            if number > groups:
                if groups == 0:
                    raise fail(f"${number} names a group, but the pattern has none")
                text.append(f"${number}")   # Kafka: a reference beyond the groups is literal
                continue
            reference = number
        else:
            raise fail(f"$ must be followed by a group number or {{name}}, got {replacement[i + 1]!r}")
        if text:
            pieces.append("".join(text))
            text.clear()
        pieces.append(reference)
    if text:
        pieces.append("".join(text))
    return tuple(pieces)
