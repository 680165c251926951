"""SandboxSettings: the one configuration object of the sandbox (no globals)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal

from . import envelopes as _envelopes
from . import faults as _faults
from . import ids as _ids


def _check(name: str, value) -> None:
    """ValueError for a webhook default the sandbox cannot honour (checked before anything is applied)."""
    if name == "webhook_envelope" and value not in _envelopes.FORMS:
        raise ValueError(f"webhook_envelope must be one of {', '.join(_envelopes.FORMS)}, not {value!r}")
    if name == "webhook_chaos" and not isinstance(value, bool):
        raise ValueError(f"webhook_chaos must be true or false, not {value!r}")
    if name == "id_block":
        _ids.check_block(value)


def _default_fx_rates() -> dict[tuple[str, str], Decimal]:
    return {("USD", "INR"): Decimal("83.25")}


@dataclass
class SandboxSettings:
    """Tunable behaviour of the simulated provider; every field has a faithful default."""

    speed: float = 1.0                      # sandbox seconds per real second (0 = frozen)
    start: datetime | None = None           # sandbox clock start (aware UTC); default: now
    seed: int = 20240101                    # seeds every random choice (ids, vouchers, chaos)
    # Where this start's ids begin (sandbox/ids.py): 0, the documented first ids at every start (recharge
    # 100001, order 5001, ...); N, every id N * 10**6 above them, and the random draws seeded with N too
    # (event ids, refs, voucher codes). serve() takes N from the start time; fixed once the sandbox runs.
    id_block: int = 0
    duplicate_guard_window_s: float = 120   # document: window length "not shown"
    processing_delay_s: float | tuple[float, float] = 20
    order_fulfilment_delay_s: float = 30
    hourly_limit: int = 1000                # Limits: general budget per API key per hour
    order_create_per_minute: int = 100      # Limits: POST /api/v1/orders per API key per minute
    require_signatures: bool = True         # Authentication 4 (mandatory-ness "not shown")
    signature_tolerance_s: int = 300        # Limits: timestamp tolerance 5 minutes
    allow_http_webhooks: bool = False       # plain http only to loopback, only when True
    recharge_enabled: bool = True           # global kill switch: False -> 503
    fx_rates: dict[tuple[str, str], Decimal] = field(default_factory=_default_fx_rates)
    # Order endpoints: "conversion charges may be added per client configuration; conversions are
    # logged in the transaction history". A percent of the converted debit, posted as its own FX_FEE
    # debit carrying the order id (0: none; one setting for every client here).
    conversion_charge_pct: Decimal = Decimal("0")
    webhook_timeout_s: float = 30           # Delivery rules 1 (real seconds: HTTP is real)
    webhook_max_attempts: int = 5
    webhook_retry_delays_s: tuple[int, ...] = (60, 120, 240, 480)
    manual_retry_attempt_cap: int = 10      # total attempts a delivery may ever use
    chaos_duplicate_rate: float = 0.5
    chaos_max_delay_s: float = 20
    idempotency_ttl_s: int = 86400          # Limits: idempotency record lifetime 24 hours
    response_delay_s: float = 0             # real seconds added to recharge submit responses
    response_delay_numbers: tuple[str, ...] = ()  # restrict the delay to these numbers
    # Errors, "Order list and order detail": 404 not_found "No Matching Result Found!" carries no
    # "(detail)" mark, so a provider may answer it for an order list page with nothing on it.
    # False: [] (this sandbox's reading, choice 9); True: that 404 instead.
    order_list_empty_404: bool = False
    # name -> Fault (sandbox/faults.py); a set or list of names is accepted and normalised
    faults: dict[str, _faults.Fault] = field(default_factory=dict)
    user_agent: str = "PartnerAPI-Webhooks/1.0 (partnerkit-sandbox)"
    # The sandbox-only envelope form and chaos of a webhook registered without them (`python -m sandbox
    # --envelope/--chaos`); a registered one is switched with PATCH /sandbox/webhooks/{id}.
    webhook_envelope: str = "standard"
    webhook_chaos: bool = False

    def __setattr__(self, name, value):
        if name == "faults":            # every way in (constructor, update, assignment)
            value = _faults.normalise(value)
        _check(name, value)
        super().__setattr__(name, value)

    def update(self, changes: dict) -> list[str]:
        """Apply a partial update (from PATCH /sandbox/settings); return unknown keys.

        Raises ValueError (nothing applied) when a value is invalid, e.g. an unknown fault.
        """
        known = {f.name for f in fields(self)}
        unknown = [k for k in changes if k not in known]
        converted = {}
        for key, value in changes.items():
            if key not in known:
                continue
            if key == "id_block" and value != self.id_block:
                raise ValueError(f"id_block is chosen when the sandbox starts (this one numbers its ids in "
                                 f"block {self.id_block}); it cannot change while it runs")
            if key == "faults":
                value = _faults.normalise(value)
            elif key == "processing_delay_s" and isinstance(value, list):
                value = (float(value[0]), float(value[1]))
            elif key in ("webhook_retry_delays_s", "response_delay_numbers"):
                value = tuple(value)
            elif key == "fx_rates":
                value = {tuple(k.split(":")): Decimal(str(v)) for k, v in value.items()}
            elif key == "conversion_charge_pct":
                try:
                    value = Decimal(str(value))
                except ArithmeticError:
                    raise ValueError(f"conversion_charge_pct must be a number, not {value!r}") from None
                if not value.is_finite() or value < 0:
                    raise ValueError(f"conversion_charge_pct must be 0 or more, not {value}")
            _check(key, value)
            converted[key] = value
        for key, value in converted.items():
            setattr(self, key, value)
        return unknown

    def public(self) -> dict:
        """A JSON-friendly view of the settings."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "fx_rates":
                value = {f"{a}:{b}": str(r) for (a, b), r in value.items()}
            elif f.name == "faults":
                value = {name: fault.public() for name, fault in sorted(value.items())}
            elif isinstance(value, (frozenset, tuple)):
                value = sorted(value) if isinstance(value, frozenset) else list(value)
            elif isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, Decimal):
                value = str(value)
            out[f.name] = value
        return out
