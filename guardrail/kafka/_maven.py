"""Maven for the pinned Java programs the tests and the demo run without Docker
(:mod:`.apache`, :mod:`.apicurio`): the version a ``pom.xml`` pins, and its
dependencies copied into a folder::

    pom_property(POM, "kafka.version")                  # "4.4.0", or None
    copy_dependencies(mvn, POM, target, quiet=True)     # None, or the first ERROR line
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

__all__ = ["copy_dependencies", "pom_property"]

_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_property(pom: Path, name: str) -> str | None:
    """The ``<properties>`` entry ``name`` of ``pom``, or None when it has none."""
    found = ElementTree.parse(pom).getroot().find(f"m:properties/m:{name}", _NS)
    return found.text.strip() if found is not None and found.text else None


def copy_dependencies(mvn: str, pom: Path, target: Path, *, quiet: bool,
                      options: tuple[str, ...] = ()) -> str | None:
    """``mvn dependency:copy-dependencies`` of ``pom`` into ``target``: None when it
    succeeded, else why (its first ERROR line, or a pointer to its output)."""
    done = subprocess.run([mvn, "-B", "-Dstyle.color=never", *(["-q"] if quiet else []),
                           "-f", str(pom), "dependency:copy-dependencies",
                           f"-DoutputDirectory={target}", *options],
                          capture_output=quiet, text=True)
    if done.returncode == 0:
        return None
    errors = [line for line in (done.stdout or "").splitlines() if "ERROR" in line]
    return errors[0] if errors else "see mvn output"
