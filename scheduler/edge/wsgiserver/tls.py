"""The server's TLS context: TLS 1.2+, no compression, no renegotiation, an unencrypted key."""

from __future__ import annotations

import ssl


class TlsSetupError(Exception):
    """The certificate or key cannot be used; `message` says which file and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def server_tls_context(cert_file: str, key_file: str = "") -> ssl.SSLContext:
    """A server-side TLS context for the PEM certificate chain `cert_file` and the PEM key
    `key_file` (empty: the key is in `cert_file`): TLS 1.2+, no compression, no renegotiation.

    Raises TlsSetupError naming the file for a path that cannot be read, a file that is not
    PEM, an encrypted key (no one could type its passphrase), or a key that is not the
    certificate's.
    """
    for what, path in (("certificate", cert_file), ("key", key_file)):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise TlsSetupError(f"cannot read the {what} file {path}: {exc.strerror}") from exc
    if not cert_file:
        raise TlsSetupError("a key file was given without a certificate file")

    def no_passphrase() -> bytes:
        raise TlsSetupError(f"the key in {key_file or cert_file} is encrypted; give it unencrypted")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert_file, key_file or None, password=no_passphrase)
    except TlsSetupError:
        raise
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc).replace("_", " ").lower()
        if "mismatch" in reason:
            why = "the key does not belong to the certificate"
        elif "pem" in reason or "no start line" in reason:
            why = "not a PEM certificate and key"
        else:
            why = reason
        raise TlsSetupError(
            f"cannot use the certificate {cert_file} with the key {key_file or cert_file}: {why}"
        ) from exc
    return context
