"""The seeded world: three clients with fixed credentials, operators, circles, catalog."""
from __future__ import annotations

from decimal import Decimal as D

from .models import Client, Operator, Product

# Circles: "No public circle list exists in v1; ids are obtained from the account manager."
CIRCLES = {1: "Delhi NCR", 2: "Mumbai", 3: "Karnataka", 4: "Tamil Nadu", 5: "Kolkata",
           6: "Maharashtra & Goa", 7: "Uttar Pradesh (East)", 8: "Kerala"}

CATEGORIES = [
    {"id": 1, "name": "Gift Cards", "description": "Retail and e-commerce gift cards"},
    {"id": 2, "name": "Digital Services", "description": "App stores, streaming, food"},
    {"id": 3, "name": "Test Products", "description": "Sandbox test products (realtime)"},
]


def operators() -> list[Operator]:
    """Recharge operators; ids are what submit's operator_id takes."""
    return [
        Operator(1, "Airtel", supports_postpaid=True, supports_special=True),
        Operator(2, "Jio", supports_postpaid=True),
        Operator(3, "Vi", supports_postpaid=True, supports_special=True, requires_circle=True),
        Operator(4, "BSNL", supports_special=True, requires_circle=True),
        Operator(5, "MTNL", is_active=False),
        Operator(6, "Tata Docomo", vendor_mapped=False),
    ]


def products() -> list[Product]:
    """Catalog products; 7 and 8 are the document's always-realtime test products."""
    return [
        Product(1, "Amazon Pay Gift Card", 1, "Amazon", "INR", "IN", "code",
                [D(100), D(250), D(500), D(1000), D(2000)], D("2.00"),
                claim_url_base="https://www.amazon.in/gc/redeem?code="),
        Product(2, "Flipkart Gift Card", 1, "Flipkart", "INR", "IN", "code_with_pin",
                [D(500), D(1000), D(5000)], D("1.50")),
        Product(3, "Google Play Recharge Code", 2, "Google", "INR", "IN", "code",
                [D(100), D(300), D(500), D(1000)], D("0.75"), max_quantity=50,
                claim_url_base="https://play.google.com/redeem?code="),
        Product(4, "Steam Wallet Card (US)", 2, "Valve", "USD", "US", "code_with_pin",
                [D(20), D(50), D(100)], D("1.00"), max_quantity=100),
        Product(5, "Swiggy Money Voucher", 2, "Swiggy", "INR", "IN", "code",
                [D(100), D(500)], is_active=False),
        Product(6, "Zomato Gift Card", 2, "Zomato", "INR", "IN", "code",
                [D(250), D(500), D(1000)], D("3.00"), realtime=False),
        Product(7, "Sandbox Test Voucher (code)", 3, "Sandbox", "INR", "IN", "code",
                [D(10), D(50), D(100)], always_realtime=True),
        Product(8, "Sandbox Test Voucher (code + PIN)", 3, "Sandbox", "INR", "IN",
                "code_with_pin", [D(10), D(50), D(100)], D("5.00"), always_realtime=True),
    ]


def clients() -> list[tuple[Client, dict[str, D]]]:
    """Seeded clients and their opening wallet balances (currency -> amount)."""
    alpha = Client("alpha", "pk_sandbox_alpha", "sk_sandbox_alpha_3f9a1c7e5b2d4068",
                   "whsec_sandbox_alpha_8c2e6a4f1b9d7035", credential_id=101,
                   recharge_discounts={1: D("2.50"), 2: D("1.75"), 3: D("3.00"), 4: D("4.00")})
    beta = Client("beta", "pk_sandbox_beta", "sk_sandbox_beta_6d0b8e2a4c1f9357",
                  "whsec_sandbox_beta_1a7c3e9b5d2f8046", credential_id=102,
                  postpaid_enabled=False, blocked_operators={4},
                  recharge_discounts={1: D("1.00"), 2: D("0.50")})
    gamma = Client("gamma", "pk_sandbox_gamma", "sk_sandbox_gamma_9e4c2a0f6b8d1357",
                   "whsec_sandbox_gamma_5b1d9f3a7c0e2468", credential_id=103)
    return [
        (alpha, {"INR": D("1000000.00"), "USD": D("5000.00")}),
        (beta, {"INR": D("500000.00")}),
        (gamma, {"USD": D("1000.00")}),
    ]
