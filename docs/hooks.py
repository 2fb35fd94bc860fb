"""MkDocs hook: the docstrings are written for Python readers (Sphinx roles such as
``:class:`Evaluator``` and ``::`` before an example); on the API page the roles
become plain code and ``::`` a colon."""

import re

_ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc|obj):(?=<code>)")
_LITERAL_MARK = re.compile(r"::(?=</p>)")


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith("reference/"):
        return html
    return _LITERAL_MARK.sub(":", _ROLE.sub("", html))
