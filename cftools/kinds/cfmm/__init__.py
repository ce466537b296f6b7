"""CFMM: one package, a module per stage (see the README's kinds section)."""

from cftools.kinds.cfmm.kind import CfmmKind

__all__ = ["CfmmKind"]
