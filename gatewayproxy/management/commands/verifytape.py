"""`python manage.py verifytape FILE --public-key PEM`: check a signed tape's hash chain and every signature;
exits non-zero naming the first bad line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gatewayproxy.plugins.tape import load_public_key, verify_tape


class Command(BaseCommand):
    """Verifies a tape written by a `signed_tape` trace exporter."""

    help = "Verify a signed tape (JSONL): the SHA-256 chain and each entry's Ed25519 signature."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the tape file")
        parser.add_argument(
            "--public-key", required=True, help="the signer's Ed25519 public key: a PEM file, or the PEM text itself"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key = load_public_key(_pem(options["public_key"]))
            with open(options["file"], encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from None
        problem = verify_tape(lines, key)
        if problem is not None:
            raise CommandError(f"line {problem.line}: {problem.reason}")
        self.stdout.write(f"ok: {sum(1 for line in lines if line.strip())} entries verified")


def _pem(value: str) -> bytes:
    """The PEM bytes of `--public-key`: inline text, else the file it names."""
    if value.lstrip().startswith("-----BEGIN"):
        return value.encode()
    with open(value, "rb") as handle:
        return handle.read()
