"""Checks of the arguments that hold several values, shared by every function that takes one.

A string where a collection of names is expected would be read one
character at a time; these checks refuse it (and any non-collection, or
an item of the wrong type) with an `ArgumentTypeError` that says what to pass.

Examples:
    >>> collection_of(["MulBackward0"], str, caller="hide", argument="ops", example="{'MulBackward0'}")
    ('MulBackward0',)
    >>> collection_of("MulBackward0", str, caller="hide", argument="ops", example="{'MulBackward0'}")
    Traceback (most recent call last):
    ...
    gradexport.errors.ArgumentTypeError: hide: ops must be a collection, such as {'MulBackward0'}, not the string 'MulBackward0': wrap it in a set or list
"""

from __future__ import annotations

import warnings
from typing import Any, TypeVar

from .errors import ArgumentTypeError, GradexportDeprecationWarning

__all__ = ["collection_of", "renamed_keyword"]

Item = TypeVar("Item")


def collection_of(value: Any, kind: type[Item], *, caller: str, argument: str, example: str) -> tuple[Item, ...]:
    """``value`` as a tuple, when it is a collection (not a string) of ``kind`` values.

    Raises:
        ArgumentTypeError: a string or bytes, a value that cannot be iterated,
            or an item that is not a ``kind`` (``bool`` is not taken for ``int``).
    """
    if isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{caller}: {argument} must be a collection, such as {example}, not the string {value!r}: wrap it in a set or list")
    try:
        items = tuple(value)
    except TypeError:
        raise ArgumentTypeError(f"{caller}: {argument} must be a collection, such as {example}, not {type(value).__name__}: pass a set or list") from None
    for item in items:
        if not isinstance(item, kind) or (kind is int and isinstance(item, bool)):
            raise ArgumentTypeError(
                f"{caller}: {argument} must hold {kind.__name__} values, such as {example}, not {item!r} ({type(item).__name__}): pass {kind.__name__} values"
            )
    return items


def renamed_keyword(old_value: Item | None, new_value: Item, *, caller: str, old: str, new: str) -> Item:
    """The value of a keyword given by its earlier name ``old`` (with a deprecation warning), else ``new_value``.

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     renamed_keyword(True, False, caller="to_networkx", old="saved", new="show_saved")
        True
        >>> str(caught[0].message)
        'to_networkx: saved= is now spelled show_saved=, as every export function spells it: pass show_saved=True'
    """
    if old_value is None:
        return new_value
    warnings.warn(
        GradexportDeprecationWarning(f"{caller}: {old}= is now spelled {new}=, as every export function spells it: pass {new}={old_value!r}"),
        stacklevel=3,  # the caller of the function that took the keyword
    )
    return old_value
