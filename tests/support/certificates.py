"""Self-signed certificates for the TLS tests, made with `openssl` as docs/security.md shows."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["self_signed"]

_KEYS = {
    "ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    "rsa": ["-newkey", "rsa:2048"],
}


def self_signed(
    folder: Path,
    *,
    names: Sequence[str] = ("localhost",),
    ips: Sequence[str] = ("127.0.0.1",),
    kind: str = "ecdsa",
    stem: str = "",
) -> tuple[Path, Path]:
    """(certificate, key) PEM files in `folder` for `names` and `ips` (subjectAltName), the
    first name (or address) as the CN; `kind` is "ecdsa" (P-256) or "rsa" (2048 bits)."""
    cert, key = folder / f"{stem}cert.pem", folder / f"{stem}key.pem"
    alt = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{i}" for i in ips)])
    subprocess.run(
        ["openssl", "req", "-x509", *_KEYS[kind], "-nodes", "-days", "2",
         "-subj", f"/CN={(list(names) or list(ips))[0]}", "-addext", f"subjectAltName={alt}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
