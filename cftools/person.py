"""A person of the workspace: one identity, named `person` throughout the library.

Label Studio names people by email, and so does the store (`AnnotationTask.assignee`, `Judgment.annotator`, the
config's `[label_studio] annotators`). Inside the workspace a `Person` is that email; anything released or exported
names them only by `Person.pseudonym`, the workspace boundary's keyed id (`cftools.boundary`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cftools.boundary import keyed_pseudonym, person_key


@dataclass(frozen=True, order=True)
class Person:
    """One person: their EMAIL as Label Studio names them, compared as the store compares it (stripped, lower case)."""

    email: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "email", person_key(self.email))  # frozen: normalised once, here

    def __str__(self) -> str:
        return self.email

    def pseudonym(self, key: bytes) -> str:
        """Their id in anything released under the workspace's KEY (`Boundary.key`): `annotator-<12 hex>`, the same
        in every release of the workspace, never their email."""
        return keyed_pseudonym(key, self.email)
