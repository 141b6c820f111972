"""`kqp sasl-credential`: the entry it prints is a users file kqp loads, verifies the password it was
made from (and no other), and never contains the password."""

from __future__ import annotations

import io
from pathlib import Path

from kqp.config import parse_config
from kqp.proxy.connection.sasl import SaslPolicy
from kqp.proxy.tools.cli import build_parser
from kqp.proxy.tools.sasl_credential import run


def test_the_printed_entry_is_a_users_file_that_verifies_the_password(tmp_path: Path) -> None:
    args = build_parser().parse_args(["sasl-credential", "--user", "alice", "--mechanism", "SCRAM-SHA-512",
                                      "--iterations", "4096"])
    out = io.StringIO()
    assert run(args, stdin=io.StringIO("correct horse\n"), stdout=out) == 0
    assert "correct horse" not in out.getvalue()
    users_file = tmp_path / "users.yaml"
    users_file.write_text(out.getvalue())
    cfg = parse_config({"sasl": {"mode": "terminate", "mechanisms": ["SCRAM-SHA-512", "PLAIN"],
                                 "users_file": str(users_file)}})
    [credential] = cfg.sasl.credentials["alice"].scram.values()
    assert credential.iterations == 4096 and cfg.sasl.credentials["alice"].password is None
    policy = SaslPolicy.from_config(cfg.sasl)
    assert policy.plain_ok("alice", "correct horse") and not policy.plain_ok("alice", "correct horse ")


def test_both_mechanisms_by_default_and_refusals() -> None:
    parser = build_parser()
    out = io.StringIO()
    assert run(parser.parse_args(["sasl-credential", "--user", "bob"]), io.StringIO("pw\n"), out) == 0
    assert "SCRAM-SHA-256:" in out.getvalue() and "SCRAM-SHA-512:" in out.getvalue()
    assert run(parser.parse_args(["sasl-credential", "--user", "bob"]), io.StringIO("\n"), io.StringIO()) == 2
    assert run(parser.parse_args(["sasl-credential", "--user", "bob", "--iterations", "10"]),
               io.StringIO("pw\n"), io.StringIO()) == 2
