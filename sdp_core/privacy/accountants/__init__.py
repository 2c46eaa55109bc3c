"""Accountants by name: `get_accountant("rdp" | "prv" | "pld").epsilon(events, delta)`."""

from sdp_core.privacy.accountants.base import ACCOUNTANTS, Accountant, get_accountant, register_accountant
from sdp_core.privacy.accountants.pld import PLDAccountant
from sdp_core.privacy.accountants.prv import PRVAccountant
from sdp_core.privacy.accountants.rdp import RDPAccountant

__all__ = ["ACCOUNTANTS", "Accountant", "PLDAccountant", "PRVAccountant", "RDPAccountant", "get_accountant", "register_accountant"]
