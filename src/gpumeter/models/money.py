"""Exact money (R12): every money term of a day is an integer number of units of the currency."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from gpumeter.models.project import AccountingError

# R12: no per-sample term may be truncated. Money is counted in integer units of 1/U of the currency, with
# U = MONEY_UNITS_BASE × the day's least common multiple of its share denominators (int_money_scale), so that
# every term is an integer: Δ in ms × 1,000 × price in 1e-8 × weight in 56ths × share. MONEY_UNITS_BASE:
# 3,600,000 ms an hour × 1,000 (energy counters are in mJ) × 10^8 (prices are read to 8 decimals) × 56 (a
# weight is k/7 or k/8 of a GPU).
PRICE_SCALE = 10**8
WEIGHT_SCALE = 56
MONEY_UNITS_BASE = 3_600_000 * 1_000 * PRICE_SCALE * WEIGHT_SCALE


def price_units(price: float | None) -> int | None:
    """A configured price in 1e-8 of the currency: the decimal the user wrote (a float's shortest text)."""
    if price is None:
        return None
    return int((Decimal(repr(float(price))) * PRICE_SCALE).to_integral_value(ROUND_HALF_EVEN))


def weight_units(weight: float) -> int:
    """A weight (R3: 1, k/7 or k/8 of a GPU) in 56ths, exactly."""
    exact = Fraction(weight).limit_denominator(WEIGHT_SCALE)
    if WEIGHT_SCALE % exact.denominator:
        raise AccountingError(f"weight {weight} is not a whole number of 7ths or 8ths of a GPU")
    return exact.numerator * (WEIGHT_SCALE // exact.denominator)
