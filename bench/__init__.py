"""Benchmarks and the fault suite, one folder per thing measured (see README.md)."""

import sys

from . import _root

# A script's first line, ``import _root``, finds that module through the
# script's own folder when it runs as a file. Imported as part of this package
# instead (``python -m bench.worker.ceiling``, a test), the root is on the path
# already and this name lets the same line resolve.
sys.modules.setdefault("_root", _root)
