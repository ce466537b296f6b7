"""MuCR: one package, a module per stage (see the README's kinds section)."""

from cftools.kinds.mucr.kind import MucrKind

__all__ = ["MucrKind"]
