"""A griffe extension for the Python API page (mkdocs.yml loads it in mkdocstrings'
options): cl-bench's docstrings name other objects with Sphinx roles
(``:func:`cl_bench.api.run```), which Markdown would show as written; each becomes a
code span of the name (:func:`docs_build.md.role_to_code`, the method pages' rule)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
