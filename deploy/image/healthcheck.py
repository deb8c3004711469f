"""The container image's HEALTHCHECK: exit 0 when this replica's `/health` answers 200.

Every replica answers 200, leader or standby, while it is a healthy member (503 says why it is
not). The port is the replica's `http_port` (environment, else 8899), over https when
`http_tls_cert_file` is set (the certificate names the replica's host, not 127.0.0.1, so it is
not verified here: the check asks this very container). Standard library only.
"""

import os
import ssl
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("http_port") or os.environ.get("PORT0") or "8899"
    tls = bool(os.environ.get("http_tls_cert_file"))
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/health"
    context = ssl._create_unverified_context() if tls else None
    try:
        with urllib.request.urlopen(url, timeout=4, context=context) as resp:
            return 0 if resp.status == 200 else 1
    except (OSError, urllib.error.URLError) as exc:
        print(f"health check {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
