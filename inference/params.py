"""Declared parameter constraints and the estimator contract shared by every entry point.

Every public parameter of every estimator, config dataclass and driver entry point
declares its constraint once, in the spirit of scikit-learn's ``_parameter_constraints``:
a dict ``name -> [constraint, ...]``; a value is valid when it satisfies at least one
constraint of its list. :func:`validate_params` checks a mapping of values against such a
declaration and raises an :class:`InvalidParameterError` (a ``ValueError`` and a ``TypeError``, as
scikit-learn's) whose message names the parameter, says what was expected and what was
given. A value for a name that has no declaration is a ``TypeError`` too, so an undeclared
public parameter cannot slip through
(``tests/test_estimator_contract.py`` walks every declaration with bad values).

Constraints
-----------
``None`` (the value ``None``), :class:`Interval` (integers or reals in an interval; NaN
always refused, ±inf only with ``inf_ok``), :class:`Options` (one of a set), :class:`InstanceOf`,
:class:`Boolean`, :class:`Callable`, :class:`Seed` (integer in [0, 2³²)), :class:`Device`
(a torch device; ``"cuda"`` without CUDA is the early ``ValueError`` of
:func:`tandem.inference.validation.resolve_device`), :class:`SequenceOf`, :class:`AnyValue`
(explicitly free, with the reason; checked elsewhere, e.g. arrays).

The estimator contract (:class:`TandemEstimator`): scikit-learn's ``BaseEstimator``
(``get_params``/``set_params``/``clone``/repr from the ``__init__`` signature), the
declared constraints checked at construction and again when ``fit`` runs (after
``set_params``), learned state in attributes ending in ``_``, one
:class:`~tandem.inference.validation.NotFittedError`, and the estimator's own Pyro
parameter store (:meth:`TandemEstimator._param_scope`): the estimator's parameters are
swapped into Pyro's global store only while one of its methods runs, so two fitted
estimators never share parameters and the user's own store is left as it was.
"""
from __future__ import annotations

import contextlib
import functools
import math
from numbers import Integral, Real

import numpy as np
import pyro
from pyro.params.param_store import ParamStoreDict
from sklearn.base import BaseEstimator

from tandem.inference.persistence import load_estimator, save_estimator
from tandem.inference.validation import SEED_MAX, NotFittedError, resolve_device

__all__ = ["Interval", "Options", "InstanceOf", "Boolean", "Callable", "Seed", "Device", "SequenceOf", "OneOf",
           "AnyValue", "validate_params", "check_param", "InvalidParameterError", "TandemEstimator", "own_params",
           "NotFittedError"]


def _is_int(v) -> bool:
    return isinstance(v, (Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v) -> bool:
    return isinstance(v, (Real, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


class _Constraint:
    """Base: ``type_ok(v)`` (the value is of a type this constraint speaks about) and ``ok(v)``."""

    def type_ok(self, v) -> bool:
        """Whether ``v`` is of a type this constraint speaks about (default: :meth:`ok`)."""
        return self.ok(v)

    def ok(self, v) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


class Interval(_Constraint):
    """A number of kind ``kind`` (``Integral`` or ``Real``) in the interval ``[low, high]``.

    NaN is never valid; ±inf only with ``inf_ok`` (reals). Integers are valid reals; bools are neither.

    Parameters
    ----------
    kind : {numbers.Integral, numbers.Real}
        The kind of number (``numpy`` integers and floats count).
    low : float, optional
        Lower bound; ``None`` → open-ended.
    high : float, optional
        Upper bound; ``None`` → open-ended.
    closed : {"both", "left", "right", "neither"}, default "both"
        Which bounds belong to the interval.
    inf_ok : bool, default False
        Whether ±inf is valid (reals).
    """

    def __init__(self, kind, low=None, high=None, closed: str = "both", inf_ok: bool = False):
        self.kind, self.low, self.high, self.closed, self.inf_ok = kind, low, high, closed, inf_ok

    def type_ok(self, v) -> bool:
        """Whether ``v`` is a number of kind ``kind`` (bools excluded).

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` has a type this constraint speaks about (its value may still be refused);
            used to say "got ... of type ..." in the message.
        """
        return _is_int(v) if self.kind is Integral else _is_real(v)

    def ok(self, v) -> bool:
        """Whether ``v`` is of kind ``kind``, not NaN, finite unless ``inf_ok``, and inside the interval.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        if not self.type_ok(v):
            return False
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not self.inf_ok):
            return False
        lo_closed = self.closed in ("both", "left")
        hi_closed = self.closed in ("both", "right")
        if self.low is not None and (x < self.low if lo_closed else x <= self.low):
            return False
        if self.high is not None and (x > self.high if hi_closed else x >= self.high):
            return False
        return True

    def __str__(self):
        what = "an integer" if self.kind is Integral else "a real number"
        lo = "-inf" if self.low is None else self.low
        hi = "inf" if self.high is None else self.high
        lb = "[" if self.closed in ("both", "left") and self.low is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.high is not None else ")"
        return f"{what} in {lb}{lo}, {hi}{rb}" + (" (inf allowed)" if self.inf_ok else "")


class Options(_Constraint):
    """One of ``options`` (values of type ``kind``, default ``str``).

    Parameters
    ----------
    options : iterable
        The valid values.
    kind : type or tuple of types, default str
        The type of the valid values.
    """

    def __init__(self, options, kind=str):
        self.options, self.kind = tuple(options), kind

    def type_ok(self, v) -> bool:
        """Whether ``v`` is an instance of ``kind``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` has a type this constraint speaks about (its value may still be refused);
            used to say "got ... of type ..." in the message.
        """
        return isinstance(v, self.kind)

    def ok(self, v) -> bool:
        """Whether ``v`` is an instance of ``kind`` and one of ``options``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        return isinstance(v, self.kind) and v in self.options

    def __str__(self):
        return "one of " + ", ".join(repr(o) for o in self.options)


class InstanceOf(_Constraint):
    """An instance of one of ``types``.

    Parameters
    ----------
    *types : type
        The accepted types.
    what : str, optional
        How the message names the expected value; ``None`` → "an instance of A or B".
    """

    def __init__(self, *types, what: str | None = None):
        self.types, self.what = types, what

    def ok(self, v) -> bool:
        """Whether ``v`` is an instance of one of ``types``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        return isinstance(v, self.types)

    def __str__(self):
        return self.what or "an instance of " + " or ".join(t.__name__ for t in self.types)


class Boolean(_Constraint):
    """A bool (Python ``bool`` or ``numpy.bool_``; integers 0/1 are refused)."""

    def ok(self, v) -> bool:
        """Whether ``v`` is a bool.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        return isinstance(v, (bool, np.bool_))

    def __str__(self):
        return "a bool"


class Callable(_Constraint):
    """A callable."""

    def ok(self, v) -> bool:
        """Whether ``v`` is callable.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        return callable(v)

    def __str__(self):
        return "a callable"


class Seed(Interval):
    """An integer seed in [0, 2³²) (an :class:`Interval` of integers; numpy integers count).

    The range is :data:`~tandem.inference.validation.SEED_MAX`'s, the one
    :func:`~tandem.inference.validation.check_seed` and :func:`~tandem.inference.numerics.set_seed`
    enforce, so a declared seed is one the seeding accepts.
    """

    def __init__(self):
        super().__init__(Integral, 0, SEED_MAX)


class Device(_Constraint):
    """A torch device ("cpu", "cuda", "cuda:1", ``torch.device``); CUDA must be available."""

    def type_ok(self, v) -> bool:
        """Whether ``v`` is a ``str`` or a ``torch.device``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` has a type this constraint speaks about (its value may still be refused);
            used to say "got ... of type ..." in the message.
        """
        import torch
        return isinstance(v, (str, torch.device))

    def ok(self, v) -> bool:
        """Whether ``v`` names a usable torch device.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.

        Raises
        ------
        ValueError
            The documented error of :func:`tandem.inference.validation.resolve_device` (a bad device
            name, CUDA not available); :func:`check_param` turns it into an
            :class:`InvalidParameterError` naming the parameter.
        """
        if not self.type_ok(v):
            return False
        resolve_device(v)   # raises the documented ValueError (bad name, CUDA not available)
        return True

    def __str__(self):
        return "a torch device ('cpu', 'cuda', 'cuda:<index>')"


class SequenceOf(_Constraint):
    """A list/tuple (``nonempty`` by default) whose every entry satisfies ``item``.

    Parameters
    ----------
    item : constraint
        The constraint every entry must satisfy (e.g. an :class:`Interval` or a :class:`OneOf`).
    nonempty : bool, default True
        Whether an empty sequence is refused.
    length : int, optional
        The required length; ``None`` → any.
    sets : bool, default False
        Whether a ``set`` / ``frozenset`` counts too (its entries are checked the same way).
    """

    def __init__(self, item: _Constraint, nonempty: bool = True, length: int | None = None, sets: bool = False):
        self.item, self.nonempty, self.length, self.sets = item, nonempty, length, sets

    def type_ok(self, v) -> bool:
        """Whether ``v`` is a list, tuple or numpy array (a ``str`` is not a sequence here).

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` has a type this constraint speaks about (its value may still be refused);
            used to say "got ... of type ..." in the message.
        """
        kinds = (list, tuple, np.ndarray) + ((set, frozenset) if self.sets else ())
        return isinstance(v, kinds) and not isinstance(v, str)

    def ok(self, v) -> bool:
        """Whether ``v`` is a sequence of the required length (non-empty if asked) whose entries satisfy ``item``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        if not self.type_ok(v) or (self.nonempty and len(v) == 0):
            return False
        if self.length is not None and len(v) != self.length:
            return False
        return all(self.item.ok(x) for x in v)

    def __str__(self):
        n = f" of length {self.length}" if self.length is not None else (" (non-empty)" if self.nonempty else "")
        return f"a sequence{' or set' if self.sets else ''}{n} of {self.item}"


class OneOf(_Constraint):
    """Any of ``constraints`` (``None`` allowed among them): for the items of a sequence.

    Parameters
    ----------
    *constraints : constraint or None
        The alternatives; ``None`` accepts the value ``None``.
    """

    def __init__(self, *constraints):
        self.constraints = constraints

    def type_ok(self, v) -> bool:
        """Whether ``v`` has a type that one of ``constraints`` speaks about.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` has a type this constraint speaks about (its value may still be refused);
            used to say "got ... of type ..." in the message.
        """
        return any(_type_matches(c, v) for c in self.constraints)

    def ok(self, v) -> bool:
        """Whether ``v`` satisfies at least one of ``constraints``.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint.
        """
        return any(_satisfies(c, v) for c in self.constraints)

    def __str__(self):
        return " or ".join("None" if c is None else str(c) for c in self.constraints)


class AnyValue(_Constraint):
    """Explicitly free at this level (``reason`` says where it is checked, e.g. arrays).

    Parameters
    ----------
    reason : str
        Where and how the value is checked instead (shown in messages).
    """

    def __init__(self, reason: str):
        self.reason = reason

    def ok(self, v) -> bool:
        """Always True: the value is checked elsewhere.

        Parameters
        ----------
        v : object
            The value to check.

        Returns
        -------
        bool
            True when ``v`` satisfies this constraint. Always True.
        """
        return True

    def __str__(self):
        return f"anything ({self.reason})"


class InvalidParameterError(ValueError, TypeError):
    """A parameter outside its declared constraint.

    Both a ``ValueError`` and a ``TypeError`` (as scikit-learn's), so callers may catch either.
    """


def _satisfies(c, v) -> bool:
    return v is None if c is None else c.ok(v)


def _type_matches(c, v) -> bool:
    return v is None if c is None else c.type_ok(v)


def check_param(constraints: list, name: str, value, where: str = "") -> None:
    """Raise ``TypeError``/``ValueError`` naming ``name`` unless ``value`` satisfies one of ``constraints``.

    Parameters
    ----------
    constraints : list
        The declared constraints of ``name`` (constraint objects or ``None`` for the value ``None``);
        the value is valid when it satisfies at least one.
    name : str
        The parameter's name, used in the message.
    value : object
        The value to check.
    where : str, default ""
        Prefix of the message (e.g. ``"McGPDS: "``).

    Raises
    ------
    InvalidParameterError
        (A ``ValueError`` and a ``TypeError``.) If ``value`` satisfies none of ``constraints``; the
        message names the parameter, what was expected and what was given (with its type when no
        constraint speaks about that type), or carries the message of a constraint that raised its own
        ``ValueError`` (:class:`Device`).
    """
    for c in constraints:
        try:
            if _satisfies(c, value):
                return
        except ValueError as e:          # a constraint with its own message (Device)
            msg = str(e)
            raise InvalidParameterError(f"{where}{msg}" if msg.startswith(f"{name}:")
                                        else f"{where}{name}: {msg}") from None
    want = " or ".join("None" if c is None else str(c) for c in constraints)
    prefix = f"{where}{name}"
    if not any(_type_matches(c, value) for c in constraints):
        raise InvalidParameterError(f"{prefix}: expected {want}, got {value!r} of type {type(value).__name__}")
    raise InvalidParameterError(f"{prefix}: expected {want}, got {value!r}")


def validate_params(declaration: dict, values: dict, where: str = "") -> None:
    """Check every ``values[name]`` against ``declaration[name]`` (see the module docstring).

    Parameters
    ----------
    declaration : dict
        ``name -> [constraint, ...]``, as a class's ``_parameter_constraints``.
    values : dict
        ``name -> value``, e.g. ``estimator.get_params(deep=False)``.
    where : str, default ""
        Prefixes the messages (e.g. ``"McGPDS: "``).

    Raises
    ------
    TypeError
        For a name without a declaration (an unknown keyword, or a public parameter someone forgot
        to declare).
    InvalidParameterError
        (A ``ValueError`` and a ``TypeError``.) For a value outside its declaration, see
        :func:`check_param`.
    """
    for name, value in values.items():
        if name not in declaration:
            raise TypeError(f"{where}unknown parameter {name!r}; expected one of {sorted(declaration)}")
        check_param(declaration[name], name, value, where)


# --------------------------------------------------------------------------- estimators
class TandemEstimator(BaseEstimator):
    """The contract every tandem estimator follows (see the module docstring).

    A subclass sets ``_parameter_constraints`` (one entry per ``__init__`` parameter) and
    calls ``self._validate_params()`` at the end of ``__init__`` and first thing in ``fit``;
    methods that touch Pyro parameters are wrapped in :func:`own_params`.
    """

    _parameter_constraints: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # every fit is all-or-nothing (see _all_or_nothing): enforced here, once, for every
        # estimator, rather than by each fit assigning its attributes in a careful order
        for name in cls._TRANSACTIONAL:
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "_all_or_nothing", False):
                setattr(cls, name, _all_or_nothing(method))

    #: methods that replace the fitted state: if one raises (bad input found late, a failed
    #: factorisation, Ctrl-C), the object keeps the state it had before the call
    _TRANSACTIONAL = ("fit",)

    def _snapshot(self) -> tuple:
        """The object's state: a shallow copy of its attributes and a copy of its own Pyro
        parameters (their values are cloned: optimisers update them in place)."""
        state = dict(self.__dict__)
        store = state.get("param_store_")
        params = None
        if store is not None and store is not pyro.get_param_store():
            params = ({k: v.detach().clone() for k, v in store._params.items()}, dict(store._constraints))
        return state, params

    def _restore(self, snapshot: tuple) -> None:
        state, params = snapshot
        self.__dict__.clear()
        self.__dict__.update(state)
        if params is not None:
            # the same store object (callers may hold it), its contents as they were: the call
            # may have replaced its dicts or updated its tensors in place
            store = state["param_store_"]
            store._params, store._param_to_name, store._constraints = {}, {}, {}
            values, cons = params
            for name, value in values.items():
                # a fresh leaf, as pyro.param makes: unconstrained values with grad enabled
                value = value.requires_grad_(value.is_floating_point())
                store._params[name] = value
                store._param_to_name[value] = name
            store._constraints.update(cons)

    # save / load: one safe format for every estimator (subclasses with more state override)
    def save(self, path) -> None:
        """Write this object (settings and fitted state) to ``path`` in tandem's safe format.

        The format is that of :func:`tandem.inference.persistence.save_estimator` (plain
        tensors/arrays + JSON), written atomically: a kill or full disk during the write leaves the
        previous file intact.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write.

        Raises
        ------
        ValueError
            Naming ``path``, before any work, if it is not a path, is a folder, or its folder is
            missing or cannot be written (:func:`tandem.inference.persistence.check_save_path`).
        TypeError
            Naming the attribute, if a public attribute holds a value the safe format cannot store
            (private caches that cannot be stored are dropped; see
            :func:`tandem.inference.persistence.save_estimator`).
        """
        save_estimator(self, path)

    @classmethod
    def load(cls, path, map_location=None):
        """Read an object written by :meth:`save`.

        Nothing is unpickled.

        Parameters
        ----------
        path : str or os.PathLike
            The file written by :meth:`save`.
        map_location : str or torch.device, optional
            Puts the file's tensors on that device; ``None`` → where they were saved.

        Returns
        -------
        TandemEstimator
            An instance of ``cls`` with the saved settings and fitted state.

        Raises
        ------
        FileNotFoundError
            If ``path`` does not exist.
        tandem.inference.persistence.PersistenceError
            (A ``ValueError``.) A damaged or foreign file, or one written for another class, naming it.
        """
        return load_estimator(cls, path, map_location)

    def _validate_params(self):
        validate_params(self._parameter_constraints, self.get_params(deep=False), f"{type(self).__name__}: ")

    def _check_fitted(self, attr: str = "fitted_", what: str = "fit"):
        if getattr(self, attr, None) is None:
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet: call {what} "
                                 "before using this method")

    @contextlib.contextmanager
    def _param_scope(self):
        """Swap this estimator's own Pyro parameters (``param_store_``) into the global store
        for the duration of the block, and the user's back afterwards (re-entrant)."""
        if self.__dict__.get("_scope_depth", 0):
            self._scope_depth += 1
            try:
                yield
            finally:
                self._scope_depth -= 1
            return
        glob = pyro.get_param_store()
        mine = self.__dict__.get("param_store_")
        if mine is glob:            # explicitly shares the global store (low-level tests/tools)
            yield
            return
        if mine is None:
            mine = ParamStoreDict()
        saved = (glob._params, glob._param_to_name, glob._constraints)
        glob._params, glob._param_to_name, glob._constraints = mine._params, mine._param_to_name, mine._constraints
        self._scope_depth = 1
        try:
            yield
        finally:
            # the block may have cleared the store (new dicts): keep what it holds now
            mine._params, mine._param_to_name, mine._constraints = (glob._params, glob._param_to_name,
                                                                     glob._constraints)
            glob._params, glob._param_to_name, glob._constraints = saved
            self._scope_depth = 0
            if mine._params or "param_store_" in self.__dict__:
                self.param_store_ = mine

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_scope_depth", None)
        store = state.pop("param_store_", None)
        if store is not None:   # Pyro keeps weak references in a store: pickle its plain state
            state["_param_store_state"] = store.get_state()
        return state

    def __setstate__(self, state):
        state = dict(state)
        saved = state.pop("_param_store_state", None)
        super().__setstate__(state)
        if saved is not None:
            store = ParamStoreDict()
            store.set_state(saved)
            self.param_store_ = store


def _all_or_nothing(method):
    """Decorator: if ``method`` raises, restore the estimator's state from before the call.

    A fit that fails after it has replaced part of the fitted state (the data's scalers, say,
    before a late check of the times refuses the call) would otherwise leave an object whose
    old fit answers through new scalers: silently wrong predictions. Applied to every
    estimator's ``fit`` by :class:`TandemEstimator`.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self.__dict__.get("_scope_depth", 0):      # nested inside another of our calls
            return method(self, *args, **kwargs)
        snapshot = self._snapshot()
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self._restore(snapshot)
            raise

    wrapper._all_or_nothing = True
    return wrapper


def own_params(method):
    """Decorator: run ``method`` inside the estimator's own Pyro parameter store.

    Parameters
    ----------
    method : callable
        A method of a :class:`TandemEstimator` subclass.

    Returns
    -------
    callable
        The wrapped method: it runs inside :meth:`TandemEstimator._param_scope`, so it reads and
        writes the estimator's ``param_store_`` and leaves the global Pyro store as it was.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._param_scope():
            return method(self, *args, **kwargs)

    return wrapper
