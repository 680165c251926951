"""partnerkit: a drop-in kit for partners of the Voucher and Mobile Recharge Partner API."""

__version__ = "0.1.0"
