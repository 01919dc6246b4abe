"""The wire formats of a signed run: a DSSE v1 envelope around an in-toto Statement v1 whose subjects
are file digests, the change's commit and the baseline (signed and verified in gate.trust.attest)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gate.dev/release-gate/v1"
BASELINE_SUBJECT = "baseline:"
"""Subject name prefix of the recorded baseline a run's reference answers came from."""


class DsseSignature(BaseModel):
    """The signer's key id and base64 Ed25519 signature over PAE(type, payload)."""

    model_config = ConfigDict(extra="allow")

    keyid: str = ""
    sig: str


class Envelope(BaseModel):
    """A DSSE v1 envelope (https://github.com/secure-systems-lab/dsse)."""

    model_config = ConfigDict(extra="forbid")

    payloadType: str
    payload: str
    signatures: list[DsseSignature]

    def payload_bytes(self) -> bytes:
        try:
            return base64.b64decode(self.payload, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("payload is not valid base64") from None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Subject(BaseModel):
    """An in-toto ResourceDescriptor as gate uses it: a name and its digests."""

    model_config = ConfigDict(extra="allow")

    name: str = ""
    digest: dict[str, str] = Field(default_factory=dict)


class Statement(BaseModel):
    """An in-toto Statement v1 (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: str = Field(default=STATEMENT_TYPE, alias="_type")
    subject: list[Subject] = Field(min_length=1)
    predicateType: str
    predicate: dict[str, Any] = Field(default_factory=dict)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def canonical(self) -> bytes:
        return json.dumps(self.dump(), sort_keys=True, separators=(",", ":")).encode()

    @property
    def commit(self) -> str | None:
        return next((s.digest["gitCommit"] for s in self.subject if s.digest.get("gitCommit")), None)

    def files(self) -> dict[str, str]:
        """name -> sha256 of every file subject (the baseline subject names no file here)."""
        return {
            s.name: s.digest["sha256"]
            for s in self.subject
            if "sha256" in s.digest and not s.name.startswith(BASELINE_SUBJECT)
        }


def parse_statement(payload: bytes) -> Statement:
    try:
        return Statement.model_validate_json(payload)
    except ValidationError as err:
        raise ValueError(f"payload is not an in-toto statement ({first_error(err, '(statement)')})") from None


def first_error(err: ValidationError, whole: str) -> str:
    """`where: what` of a validation error's first problem (`whole`: where the value itself is wrong)."""
    first = err.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in first['loc']) or whole}: {first['msg']}"
