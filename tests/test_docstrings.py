"""One docstring style (numpy, rendered by napoleon) for the public objects of the package.

Every public function, class and public method of every module of the package has a
``Parameters`` section (``Attributes`` for a dataclass) that documents exactly the parameters of
its signature, so the API reference renders them as a table and cannot drift from the code.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import pytest


def _package_modules() -> list[str]:
    """Every module of the installed package (its subpackages included)."""
    import pkgutil

    import tandem
    return ["tandem"] + sorted(m.name for m in pkgutil.walk_packages(tandem.__path__, "tandem."))


#: every module of the package follows the numpy docstring style
NUMPY_STYLE = _package_modules()

_HEADER = re.compile(r"^(Parameters|Attributes|Returns|Yields|Raises|Warns|See Also|Notes|Examples|References)\n-{3,}$",
                     re.M)


def _section(doc: str, name: str) -> list[str] | None:
    """The parameter names listed in section ``name`` of a numpy docstring (None: no section)."""
    heads = list(_HEADER.finditer(doc))
    for i, h in enumerate(heads):
        if h.group(1) == name:
            body = doc[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
            names = []
            for line in body.split("\n"):
                if line and not line[0].isspace():
                    names += [n.strip().lstrip("*") for n in line.split(" : ")[0].split(",")]
            return names
    return None


def _public_objects():
    for modname in NUMPY_STYLE:
        mod = importlib.import_module(modname)
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for n in names:
            obj = getattr(mod, n)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != modname:
                continue
            yield f"{modname}.{n}", obj
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    if not k.startswith("_") and inspect.isfunction(v):
                        yield f"{modname}.{n}.{k}", v


def _signature_params(obj) -> list[str]:
    fn = obj.__init__ if inspect.isclass(obj) else obj
    if not inspect.isfunction(fn):          # a builtin's __init__ (object, Exception): nothing to document
        return []
    # self/cls of a method are not documented; a module-level function's ``cls`` parameter is
    bound = ("self", "cls") if "." in fn.__qualname__ else ()
    return [p for p in inspect.signature(fn).parameters if p not in bound]


OBJECTS = list(_public_objects())


def test_the_converted_modules_have_public_objects():
    assert len(OBJECTS) > 30


@pytest.mark.parametrize("qualname,obj", OBJECTS, ids=[q for q, _ in OBJECTS])
def test_numpy_docstring_documents_exactly_the_signature(qualname, obj):
    doc = inspect.getdoc(obj) or ""
    assert doc and not doc.startswith("\n"), f"{qualname}: no summary line"
    params = _signature_params(obj)
    if not params:
        return
    # a dataclass's fields are its parameters: documented as Parameters or as Attributes
    is_dataclass = inspect.isclass(obj) and dataclasses.is_dataclass(obj)
    sections = ("Parameters", "Attributes") if is_dataclass else ("Parameters",)
    listed = next((n for n in (_section(doc, s) for s in sections) if n is not None), None)
    assert listed is not None, f"{qualname}: no numpy-style {' or '.join(sections)} section"
    assert set(listed) == set(params), f"{qualname}: documents {sorted(listed)}, signature has {sorted(params)}"
