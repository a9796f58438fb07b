"""GPU hardware profiles: datasheet catalog, clock-locked variants, calibrated profiles.

Nothing here measures at import; `solforge.hardware.calibrate` measures on request.
"""

from solforge.hardware.catalog import DATASHEETS, datasheet_for_device, find_datasheet
from solforge.hardware.load import catalog_names, load_profile, save_profile
from solforge.hardware.profile import KINDS, HardwareProfile, Source
from solforge.hardware.units import UNITS

__all__ = [
    "DATASHEETS",
    "KINDS",
    "UNITS",
    "HardwareProfile",
    "Source",
    "catalog_names",
    "datasheet_for_device",
    "find_datasheet",
    "load_profile",
    "save_profile",
]
