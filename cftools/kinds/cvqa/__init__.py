"""C-VQA: one package, a module per stage (see the README's kinds section)."""

from cftools.kinds.cvqa.kind import CvqaKind

__all__ = ["CvqaKind"]
