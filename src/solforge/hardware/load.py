"""Turn a user's hardware spec into a profile: a catalog name, NAME@<clock>, or a JSON file.

Examples: "h200", "H200-SXM", "B200@1500MHz" (every SM-clock peak scaled to a locked 1500 MHz),
"B200@1.5GHz", "profiles/h200-measured.json" (as written by `solforge calibrate`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from solforge.errors import HardwareError
from solforge.hardware.catalog import DATASHEETS, find_datasheet
from solforge.hardware.profile import HardwareProfile

_CLOCK_LOCKED = re.compile(r"^(?P<base>.+?)\s*@\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<scale>mhz|ghz)$",
                           re.IGNORECASE)


def catalog_names() -> list[str]:
    return list(DATASHEETS)


def load_profile(spec: str) -> HardwareProfile:
    """The profile a spec names; HardwareError, listing the known names, when none matches."""
    locked = _CLOCK_LOCKED.match(spec.strip())
    if locked:
        mhz = float(locked["value"]) * (1000 if locked["scale"].lower() == "ghz" else 1)
        return load_profile(locked["base"]).at_clock(mhz)
    sheet = find_datasheet(spec)
    if sheet is not None:
        return sheet.profile()
    path = Path(spec)
    if path.suffix == ".json" or path.is_file():
        return _read_profile_file(path)
    raise HardwareError(f"unknown hardware {spec!r}: use one of {', '.join(catalog_names())}, "
                        f"NAME@<MHz>MHz for a locked clock, or a profile .json file")


def _read_profile_file(path: Path) -> HardwareProfile:
    if not path.is_file():
        raise HardwareError(f"{path}: no such hardware profile file")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HardwareError(f"{path}: not valid JSON: {exc}") from None
    return HardwareProfile.from_dict(data, origin=str(path))


def save_profile(profile: HardwareProfile, path: Path, extra: dict | None = None) -> None:
    """Write a profile as JSON; `extra` adds keys from_dict tolerates (calibrate's records)."""
    data = {**profile.to_dict(), **(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
