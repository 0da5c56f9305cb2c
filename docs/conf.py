"""Sphinx configuration for the tandem documentation (Markdown via myst-parser, API via autodoc).

Build: ``sphinx-build -W -b html docs docs/_build/html`` with tandem installed
(``pip install -e ".[docs]"``). The API reference is generated at build time by recursive
autosummary, so every module and public name of the installed package appears without
being listed here.
"""
from __future__ import annotations

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

import tandem

project = "tandem"
author = "tandem developers"
copyright = "tandem developers"
release = tandem.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
]

# numpy-style docstrings (``Parameters`` / ``Returns`` / ``Attributes`` sections under dashes)
# render as field lists; Google style is off so that "Args:"-like prose is left alone.
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
# ``Attributes`` sections render as ``:ivar:`` fields, not as attribute directives: a class that
# is re-exported by its package (tandem.inference.FitResult) would otherwise describe each
# attribute twice
napoleon_use_ivar = True

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
templates_path = ["_templates"]
# _incoming/ holds contributors' drafts not yet folded into the pages; results/_tables/ holds
# generated tables that the results pages include (they are not pages of their own).
exclude_patterns = ["_build", "_incoming", "results/_tables", "_tables", "api/_generated/**/README*"]

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# napoleon turns shape words in numpy-style type fields ("(B, d) array") into cross-references;
# where a word is also an attribute name of two documented paths (CoupledProjections.B) Sphinx
# reports the ambiguity, which is not an error of the docs
suppress_warnings = ["ref.python"]

html_theme = "alabaster"
html_static_path = []
html_title = "tandem"


# --- Docstrings that are not valid reStructuredText are shown verbatim -------------------
# The package's docstrings are written for readers of the source: they use |x| for
# determinants and norms, Unicode maths and aligned plain-text tables, which reST reads as
# substitutions, block quotes or malformed tables. Such a docstring is rendered as a
# literal block (exactly as in the source) instead of failing the ``-W`` build; docstrings
# that parse cleanly are rendered as reST.

_PARSER = Parser()
_SETTINGS = get_default_settings(Parser)
_SETTINGS.report_level = 5   # nothing is printed; problems are collected below
_SETTINGS.halt_level = 5


def _is_clean_rst(text: str, env) -> bool:
    _SETTINGS.env = env          # Sphinx's roles (:func:, :math:, ...) look the build up here
    doc = new_document("<docstring>", _SETTINGS)
    problems = []
    doc.reporter.attach_observer(lambda msg: problems.append(msg) if msg["level"] >= 2 else None)
    _PARSER.parse(text, doc)
    # substitutions (|x|) fail only later, when they are resolved; a section title inside a
    # docstring is an error in autodoc's context
    bad = (nodes.substitution_reference, nodes.section, nodes.problematic, nodes.system_message)
    return not problems and not any(isinstance(n, bad) for n in doc.findall())


def _verbatim_if_not_rst(app, what, name, obj, options, lines):
    if not lines or _is_clean_rst("\n".join(lines), app.env):
        return
    body = ["    " + ln if ln.strip() else "" for ln in lines]
    lines[:] = ["::", ""] + body + [""]


def _skip_foreign_members(app, what, name, obj, skip, options):
    # the estimators inherit scikit-learn's BaseEstimator methods (get_params, set_params,
    # set_*_request): they are documented by scikit-learn, and their docstrings refer to
    # its glossary, which this build does not have
    module = getattr(obj, "__module__", None) or ""
    if what == "class" and module.startswith("sklearn"):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
    # after napoleon (registered when the extension loaded, same priority → earlier), so the
    # check sees napoleon's reST, not the numpy-style source
    app.connect("autodoc-process-docstring", _verbatim_if_not_rst)
