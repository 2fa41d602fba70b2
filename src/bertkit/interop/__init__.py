"""Hugging Face checkpoint interop: one key table (``hf``), directory load and save."""

from bertkit.interop.hf import LoadReport, hf_to_ours, ours_to_hf
from bertkit.interop.pretrained import (
    check_length_fits,
    load_pretrained,
    load_with_report,
    read_state_dict,
    save_pretrained,
)

__all__ = [
    "LoadReport",
    "check_length_fits",
    "hf_to_ours",
    "load_pretrained",
    "load_with_report",
    "ours_to_hf",
    "read_state_dict",
    "save_pretrained",
]
