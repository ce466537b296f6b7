"""A person overrules an automatic check: `cftools flags waive ITEM CODE --reason TEXT` (and `list`, `undo`).

Flags are the checks' (stored rows) and those the edit checks gave an item's edit candidates (`data.edit_checks`,
`data.irrelevant_edit_checks`; a waived edit flag no longer keeps its candidate from people). A waiver is kept in
the item's data (`data.waived_flags[CODE]` = who, when, why) and each waive or undo is an event in the item's history (stage
`flags`). The flag itself stays stored and released (with its waiver); a
waived flag no longer blocks the item: the next `cftools check` moves it on as if the flag were not there. Who:
`CFTOOLS_USER`, else `[user] name` in cftools.toml, else the operating system's user name.
"""

from __future__ import annotations

import getpass
import os
from typing import Any, Optional

from sqlalchemy import or_, select

from cftools.errors import CftoolsError, Hint
from cftools.models import CheckFlag, Item, ItemEvent, utcnow
from cftools.store import Store

STAGE = "flags"
WAIVED = "waived_flags"  # the key of an item's data that holds its waivers


def current_user(config: Optional[dict[str, Any]] = None) -> str:
    """Who is acting: CFTOOLS_USER, the workspace's `[user] name`, else the OS user."""
    named = os.environ.get("CFTOOLS_USER") or str(((config or {}).get("user") or {}).get("name") or "")
    if named.strip():
        return named.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment (a container without a passwd entry)
        return f"uid {os.getuid()}"


def waived_codes(data: Optional[dict[str, Any]]) -> set[str]:
    return set(((data or {}).get(WAIVED) or {}))


def _item(session: Any, ref: str) -> Item:
    """An item by key, or by id when REF is a number that is no item's key."""
    query = select(Item).where(or_(Item.key == ref, Item.id == int(ref)) if ref.isdigit() else Item.key == ref)
    found = sorted(session.execute(query).scalars(), key=lambda i: i.key != ref)
    if not found:
        raise CftoolsError(f"no item {ref!r} (give an item's key or id)")
    return found[0]


EDIT_CHECK_SETS = (("edit_checks", "candidate"), ("irrelevant_edit_checks", "irrelevant candidate"))


def edit_flags(data: Optional[dict[str, Any]]) -> dict[str, str]:
    """Code -> reason of the flags the edit checks gave the item's edit candidates (`data.edit_checks`, and the
    irrelevant edit's `data.irrelevant_edit_checks`), each reason naming its candidates."""
    found: dict[str, list[str]] = {}
    for key, label in EDIT_CHECK_SETS:
        for check in (data or {}).get(key) or []:
            for flag in check.get("flags") or []:
                found.setdefault(str(flag.get("code")), []).append(f"{label} {check.get('k')}: {flag.get('reason')}")
    return {code: "; ".join(reasons) for code, reasons in found.items()}


def _flag_codes(session: Any, item: Item) -> dict[str, str]:
    """Code -> reason of every flag of ITEM: the checks' (stored rows) and its edit candidates'."""
    return {**edit_flags(item.data), **dict(session.execute(
        select(CheckFlag.code, CheckFlag.reason).where(CheckFlag.item_id == item.id)).all())}


def waive(store: Store, ref: str, code: str, reason: str, who: str) -> dict[str, Any]:
    """Waive flag CODE of item REF for REASON; recorded with WHO and when in the item's history."""
    if not reason.strip():
        raise CftoolsError("a waiver needs a reason", hint=Hint("{message}: {reason} TEXT", reason="--reason"))
    with store.write() as session:
        item = _item(session, ref)
        flags = _flag_codes(session, item)
        if code not in flags:
            raise CftoolsError(f"item {item.key} has no flag {code!r}"
                               + (f" (its flags: {', '.join(sorted(flags))})" if flags else " (it has no flags)"))
        waivers = dict((item.data or {}).get(WAIVED) or {})
        if code in waivers:
            raise CftoolsError(f"flag {code!r} of item {item.key} is already waived by {waivers[code]['by']}: "
                               f"`cftools flags undo {item.key} {code}` first")
        now = utcnow()
        waiver = {"by": who, "at": now.isoformat(), "reason": reason.strip(), "flag_reason": flags[code]}
        item.data = {**(item.data or {}), WAIVED: {**waivers, code: waiver}}
        item.updated_at = now  # the next check run looks at the item again and moves it on
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage=STAGE, from_status=item.status, to_status=item.status,
                              detail={"waived": code, **waiver}, created_at=now))
        return {"item": item.key, "code": code, **waiver}


def undo(store: Store, ref: str, code: str, who: str) -> dict[str, Any]:
    """Withdraw the waiver of flag CODE of item REF: the flag blocks the item again."""
    with store.write() as session:
        item = _item(session, ref)
        waivers = dict((item.data or {}).get(WAIVED) or {})
        if code not in waivers:
            raise CftoolsError(f"flag {code!r} of item {item.key} is not waived")
        withdrawn = waivers.pop(code)
        data = {**(item.data or {}), WAIVED: waivers}
        if not waivers:
            data.pop(WAIVED)
        item.data = data
        now = utcnow()
        item.updated_at = now
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage=STAGE, from_status=item.status, to_status=item.status,
                              detail={"waiver_undone": code, "by": who, "waived_by": withdrawn.get("by")},
                              created_at=now))
        return {"item": item.key, "code": code, "by": who, "at": now.isoformat()}


def list_flags(store: Store, ref: Optional[str] = None) -> list[dict[str, Any]]:
    """Every stored check flag (of item REF only, when given) with its waiver, if any."""
    with store.session() as session:
        query = (select(Item.key, Item.status, Item.data, CheckFlag.code, CheckFlag.reason)
                 .join(CheckFlag, CheckFlag.item_id == Item.id))
        edited = select(Item.key, Item.status, Item.data).where(Item.data.is_not(None))
        if ref is not None:
            one = _item(session, ref).id
            query, edited = query.where(Item.id == one), edited.where(Item.id == one)
        rows = list(session.execute(query))
        rows += [(key, status, data, code, reason) for key, status, data in session.execute(edited)
                 for code, reason in edit_flags(data).items()]
    return [{"item": key, "status": status, "code": code, "reason": reason,
             "waived": ((data or {}).get(WAIVED) or {}).get(code)}
            for key, status, data, code, reason in sorted(rows, key=lambda row: (row[0], row[3]))]
