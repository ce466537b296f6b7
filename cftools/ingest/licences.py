"""The licence of each source dataset: stated at ingest (`--licence`, or `[sources]` in cftools.toml), kept in
the store, listed on the release card; export refuses to stamp one licence over sources under others.

cftools.toml:

    [sources]
    licence = "CC-BY-4.0"                  # every ingest that states none
    [sources.licences]
    "vqav2:val2014" = "CC-BY-4.0"          # one dataset (its name in the store)

An ingest with no licence keeps what the store already has for its dataset, else records "unknown".
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from sqlalchemy import select

from cftools.errors import CftoolsError
from cftools.models import DatasetLicence, utcnow

UNKNOWN = "unknown"
NON_COMMERCIAL = re.compile(r"non[-_ ]?commercial|\bnc\b|-nc-|cc-by-nc", re.IGNORECASE)

# What an ingest is given: a licence, none, or a choice by dataset name (the name is known only once read).
LicenceChoice = Union[str, Callable[[str], Optional[str]], None]


def clean_licence(value: Optional[str]) -> Optional[str]:
    """A licence as stored: stripped, one line; None when blank."""
    if value is None:
        return None
    text = str(value).strip()
    if "\n" in text or "\r" in text:
        raise CftoolsError(f"a licence is one line, not {text!r}")
    return text or None


def is_non_commercial(licence: Optional[str]) -> bool:
    """The licence says its work is not for commercial use (CC BY-NC, the FLUX Non-Commercial licences, ...)."""
    return bool(licence) and bool(NON_COMMERCIAL.search(str(licence)))


def configured_licence(config: Mapping[str, Any], dataset: str) -> Optional[str]:
    """The licence cftools.toml's [sources] section gives DATASET: its own entry, else the section's default."""
    per_dataset = config.get("licences") or {}
    if not isinstance(per_dataset, Mapping):
        raise CftoolsError("[sources.licences] in cftools.toml must be a table of dataset = licence")
    return clean_licence(per_dataset.get(dataset)) or clean_licence(config.get("licence"))


def licence_choice(flag: Optional[str], config: Mapping[str, Any]) -> Callable[[str], Optional[str]]:
    """The --licence flag wins over the configuration."""
    given = clean_licence(flag)
    return lambda dataset: given or configured_licence(config, dataset)


def chosen_licence(choice: LicenceChoice, dataset: str) -> Optional[str]:
    return clean_licence(choice(dataset) if callable(choice) else choice)


def record_licence(session, dataset: str, licence: Optional[str]) -> str:  # noqa: ANN001
    """Store DATASET's licence (a stated licence replaces the stored one); returns the licence now in force."""
    row = session.get(DatasetLicence, dataset)
    if licence is None:
        if row is not None:
            return row.licence
        licence = UNKNOWN
    if row is None:
        session.add(DatasetLicence(dataset=dataset, licence=licence))
    elif row.licence != licence:
        row.licence, row.updated_at = licence, utcnow()
        session.add(row)
    return licence


def licences_of(session, datasets: Iterable[str]) -> dict[str, str]:  # noqa: ANN001
    """Dataset -> licence for DATASETS; a dataset no ingest stated a licence for is "unknown"."""
    wanted = sorted(set(datasets))
    known = dict(session.execute(select(DatasetLicence.dataset, DatasetLicence.licence)
                                 .where(DatasetLicence.dataset.in_(wanted))).all()) if wanted else {}
    return {dataset: known.get(dataset, UNKNOWN) for dataset in wanted}


def same_licence(a: str, b: str) -> bool:
    """Licence identifiers compare without regard to case (SPDX ids are case-insensitive)."""
    return a.strip().casefold() == b.strip().casefold()


def licence_conflicts(release_licence: str, source_licences: Mapping[str, str]) -> dict[str, str]:
    """The sources whose licence is not RELEASE_LICENCE: "unknown" is another licence than any stated one."""
    return {dataset: licence for dataset, licence in source_licences.items()
            if not same_licence(licence, release_licence)}
