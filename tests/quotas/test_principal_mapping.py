"""Kafka's ssl.principal.mapping.rules, on the cases of Kafka's own SslPrincipalMapperTest.

The cases are re-derived from what that test asserts: which rule strings parse and which are
refused, what five distinguished names map to under one list of rules, and how rule strings split.
Kafka states splitting through its `toString`; here each case says the (pattern, replacement,
case) triples that string means, read off Kafka's expected output by hand.
"""

from __future__ import annotations

import pytest
from helpers.java_reference import JavaReference

from kqp.quotas.principal_mapping import NoMatchingRule, Rule, RuleError, parse_rules


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_kafka_s_valid_rules_parse(rules: str) -> None:
    assert parse_rules(rules).rules


@pytest.mark.parametrize("rules", [
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",      # no closing slash
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",   # the keyword is upper case
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_kafka_s_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(RuleError):
        parse_rules(rules)


KAFKA_RULES = ", ".join([
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
])


@pytest.mark.parametrize(("name", "user"), [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),                        # rule 1, lower-cased
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),             # rule 2: $1@$2
    ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),                         # rule 3, upper-cased
    ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),                    # rule 4
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
])
def test_kafka_s_mapping_cases(name: str, user: str) -> None:
    assert parse_rules(KAFKA_RULES).name(name) == user


def test_the_same_rules_as_a_yaml_list() -> None:
    listed = parse_rules([rule.strip() for rule in KAFKA_RULES.split(", ")])
    assert listed == parse_rules(KAFKA_RULES)
    assert listed.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"


D = Rule()


def r(pattern: str, replacement: str, case: str = "") -> Rule:
    return Rule.compile(pattern, replacement, case)


@pytest.mark.parametrize(("text", "rules"), [
    ("", []),
    ("DEFAULT", [D]),
    ("RULE://", [r("", "")]),
    ("RULE:/.*/", [r("", ".*")]),
    ("RULE:/.*/L", [r("", ".*", "L")]),
    ("RULE://,DEFAULT", [r("", ""), D]),
    ("  RULE:// ,  DEFAULT  ", [r("", ""), D]),
    ("  RULE:   /     / ,  DEFAULT  ", [r("   ", "     "), D]),
    ("  RULE:  /     /U   ,DEFAULT  ", [r("  ", "     ", "U"), D]),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", [r("([A-Z]*)", "$1", "U"), r("([a-z]+)", "$1"), D]),
    # empty rules are ignored
    (",   , , ,      , , ,   ", []),
    (",,RULE://,,,DEFAULT,,", [r("", ""), D]),
    (",  , RULE: /   /    ,,,   DEFAULT, ,   ", [r(" ", "   "), D]),
    ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", [r("   ", "  ", "U"), D]),
    # escapes stay in the parts, and an escaped slash does not end a part
    (r"RULE:\/\\\(\)\n\t/\/\//", [r(r"\/\\\(\)\n\t", r"\/\/")]),
    (r"RULE:\**\/+/*/L,RULE:\/*\**/**/", [r(r"\**\/+", "*", "L"), r(r"\/*\**", "**")]),
    # "rules rule": RULE: and DEFAULT inside parts are just text
    (r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
     [r(",RULE:,", r",RULE:,\/", "U"), r(",", "RULE:,"), r(",RULE:,", "L,RULE:,", "L"),
      r(", DEFAULT, ", "DEFAULT"), D]),
])
def test_kafka_s_rule_splitting(text: str, rules: list[Rule]) -> None:
    assert list(parse_rules(text).rules) == rules


def test_an_escaped_comma_and_spaces_inside_a_name() -> None:
    mapper = parse_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


# -- beyond Kafka's test: what kqp checks when the config loads, and the replacement's corners -----

def test_no_rule_applies() -> None:
    mapper = parse_rules("RULE:^CN=(.*?),OU=eng.*$/$1/")
    assert mapper.name("CN=alice,OU=eng,O=Acme") == "alice"
    with pytest.raises(NoMatchingRule, match="CN=bob,OU=ops"):
        mapper.name("CN=bob,OU=ops")


@pytest.mark.parametrize(("rules", "name", "user"), [
    # A reference beyond the pattern's groups is literal text (Kafka escapes it before Java sees it).
    ("RULE:^CN=(.*?),.*$/$1-$2/", "CN=a,O=b", "a-$2"),
    # Java reads digits while the number is still a group: $12 with one group is $1 then "2".
    ("RULE:^CN=(.*?),.*$/$12/", "CN=a,O=b", "a2"),
    ("RULE:^CN=(.*?),.*$/$52/", "CN=a,O=b", "$52"),
    ("RULE:^CN=(.*?),.*$/\\$1/", "CN=a,O=b", "$1"),                 # an escaped $ is a dollar
    ("RULE:^CN=(.*?),.*$/$0!/", "CN=a,O=b", "CN=a,O=b!"),           # $0: the whole match
    ("RULE:^CN=(?<user>[^,]*),.*$/${user}/U", "CN=a,O=b", "A"),     # Java's named groups
    ("RULE:^CN=(x)?([^,]*),.*$/[$1]$2/", "CN=a,O=b", "[]a"),         # an unmatched group is empty
    ("RULE:^CN=\\w+$/ok/", "CN=\u00e9t\u00e9", None),                # \w is ASCII, as in Java
    ("RULE:a|ab/X/", "ab", "Xb"),    # whole name matched, but replaceAll's first match is "a"
])
def test_replacement_corners(rules: str, name: str, user: str | None) -> None:
    assert parse_rules(rules).rules[0].apply(name) == user


@pytest.mark.parametrize(("rules", "why"), [
    ("RULE:^CN=.*$/$1/", "has none"),                 # Java would fail on every name it matches
    ("RULE:^CN=(.*$/$1/", "not a regular expression"),
    ("RULE:^CN=(.*)$/$/", "at the end"),
    ("RULE:^CN=(.*)$/$x/", "followed by a group number"),
    ("RULE:^CN=(.*)$/${who}/", "no group named 'who'"),
])
def test_broken_rules_are_found_when_parsed(rules: str, why: str) -> None:
    with pytest.raises(RuleError, match=why):
        parse_rules(rules)


def test_a_replacement_cannot_end_in_a_lone_backslash() -> None:
    # The rule grammar never cuts a part after a lone "\\"; a rule built directly is checked too.
    with pytest.raises(RuleError, match="trailing"):
        Rule.compile("^CN=(.*)$", "$1\\", "")


# Rules whose replacements name only groups the pattern has: there Kafka hands the replacement to
# Java untouched, so Java's own replaceAll is the reference.
JAVA_CASES = [
    ("^CN=(.*?),OU=ServiceUsers.*$", "$1", "CN=Duke,OU=ServiceUsers,O=Org,C=US"),
    ("^CN=(.*?),.*$", "$12", "CN=a,O=b"),
    ("^CN=(.*?),.*$", "\\$1", "CN=a,O=b"),
    ("^CN=(.*?),.*$", "$0!", "CN=a,O=b"),
    ("^CN=(?<user>[^,]*),.*$", "${user}", "CN=a,O=b"),
    ("^CN=(x)?([^,]*),.*$", "[$1]$2", "CN=a,O=b"),
    ("^CN=\\w+$", "ok", "CN=\u00e9t\u00e9"),
    ("a|ab", "X", "ab"),
    (".*", "X", "abc"),
    ("(a*)", "<$1>", "aaa"),
    ("^CN=((\\\\, *|\\w)+)(,.*|$)", "$1", "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz"),
    ("(?i)cn=(.*)", "$1", "CN=x"),
    ("(?i)cn=(.*)", "$1", "\u017fN=x"),   # a long s folds to S only with Unicode case folding
    ("^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$", "$1", "cN=duke,OU=JavaSoft,O=Sun Microsystems"),
    ("(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)(\\d)", "$11-$10-$111", "12345678901"),
]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> JavaReference:
    return JavaReference(tmp_path_factory.mktemp("java"))


def test_java_agrees(java: JavaReference) -> None:
    mine = [Rule.compile(pattern, replacement, "").apply(dn) for pattern, replacement, dn in JAVA_CASES]
    assert mine == java.replace_all(JAVA_CASES)
