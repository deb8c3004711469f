"""`python -m tests.bench [NAME] [ARGS]`: run one benchmark (or all) and print their figures."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> None:
    here = Path(__file__).parent
    names = sorted(
        m.name[len("bench_") :]
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )
    args = sys.argv[1:]
    chosen = [args.pop(0)] if args and not args[0].startswith("-") else names
    for name in chosen:
        if name not in names:
            sys.exit(f"unknown benchmark {name!r}; choose from {', '.join(names)}")
        print(f"== bench {name}", flush=True)
        module = importlib.import_module(f"tests.bench.bench_{name}")
        module.main(args)


if __name__ == "__main__":
    main()
