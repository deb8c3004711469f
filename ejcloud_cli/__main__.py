"""Entry point of the `ejcloud` console script (filled in by the CLI work)."""

from __future__ import annotations

import sys


def main() -> int:
    print("ejcloud: not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
