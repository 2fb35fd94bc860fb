"""Run by mkdocs-gen-files during ``mkdocs build``: the reference pages generated
from the code (:mod:`guardrail.reference`)."""

import mkdocs_gen_files

from guardrail.reference import pages

for path, text in pages().items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)
