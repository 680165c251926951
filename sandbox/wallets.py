"""The ledger: wallets, transactions (every debit, refund, conversion), and their JSON."""
from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from .clock import iso
from .money import money_str, q2
from .models import Transaction, Wallet

TYPES = ("TOPUP", "ORDER", "ORDER_REFUND", "RECHARGE", "RECHARGE_REFUND", "ADJUSTMENT")


class InsufficientFunds(Exception):
    """A debit larger than the wallet balance."""


def post(sb, wallet: Wallet, type_: str, direction: str, amount: Decimal, *,
         created_at: datetime | None = None, allow_negative: bool = False, **links) -> Transaction:
    """Move money in or out of a wallet and record the transaction (caller holds the lock)."""
    amount = q2(amount)
    if amount < 0:
        raise ValueError("transaction amounts are positive; direction carries the sign")
    delta = amount if direction == "CREDIT" else -amount
    if direction == "DEBIT" and not allow_negative and wallet.balance + delta < 0:
        raise InsufficientFunds(wallet.id)
    when = created_at or sb.clock.now()
    wallet.balance = q2(wallet.balance + delta)
    wallet.updated_at = when
    txn = Transaction(sb.next_id("transaction"), wallet.client_key, wallet.id, type_, direction,
                      amount, wallet.currency, wallet.balance, when, **links)
    sb.transactions[txn.id] = txn
    return txn


def wallet_for(sb, client_key: str, currency: str) -> Wallet | None:
    """The client's wallet in `currency`, if any."""
    return next((w for w in sb.wallets.values()
                 if w.client_key == client_key and w.currency == currency), None)


def client_wallets(sb, client_key: str) -> list[Wallet]:
    """The client's wallets, INR first then by id."""
    own = [w for w in sb.wallets.values() if w.client_key == client_key]
    return sorted(own, key=lambda w: (w.currency != "INR", w.id))


def fx_rate(sb, source: str, target: str) -> Decimal | None:
    """Units of `target` per unit of `source` from settings.fx_rates (inverse if needed)."""
    if source == target:
        return Decimal(1)
    rates = sb.settings.fx_rates
    if (source, target) in rates:
        return Decimal(rates[(source, target)])
    if (target, source) in rates:
        return (Decimal(1) / Decimal(rates[(target, source)])).quantize(Decimal("0.00000001"))
    return None


def wallet_json(wallet: Wallet) -> dict:
    """Wallet record (shape chosen by the sandbox; see docs/sandbox.md)."""
    return {"id": wallet.id, "currency": wallet.currency, "balance": money_str(wallet.balance),
            "updated_at": iso(wallet.updated_at)}


def txn_json(txn: Transaction) -> dict:
    """Transaction record; unset optional fields are omitted, as for recharges."""
    out = {"id": txn.id, "type": txn.type, "direction": txn.direction,
           "amount": money_str(txn.amount), "currency": txn.currency, "wallet_id": txn.wallet_id,
           "balance_after": money_str(txn.balance_after), "created_at": iso(txn.created_at)}
    if txn.description:
        out["description"] = txn.description
    for name in ("order_id", "recharge_id", "reference_number", "original_currency"):
        value = getattr(txn, name)
        if value is not None:
            out[name] = value
    if txn.original_amount is not None:
        out["original_amount"] = money_str(txn.original_amount)
    if txn.fx_rate is not None:
        out["fx_rate"] = f"{txn.fx_rate.normalize():f}"
    return out
