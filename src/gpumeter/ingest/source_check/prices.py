"""What the GPU time is priced at, checked: OpenCost's GPU prices for every GPU node, where the rate card
takes them from OpenCost."""

from __future__ import annotations

from gpumeter.ingest.source_check.findings import OPENCOST, Verdict, few
from gpumeter.ingest.source_check.window import DcgmSeries, SourceWindow


def gpu_prices(
    window: SourceWindow, dcgm: list[DcgmSeries], prices: list[dict[str, str]], nodes: set[str]
) -> None:
    opencost = window.config.rate_card.price_source == "opencost"
    priced = {p["node"] for p in prices if p.get("node")}
    gpu_nodes = {h for s in dcgm if (h := s.labels.get("Hostname") or s.labels.get("hostname"))}
    gpu_nodes = (gpu_nodes & nodes) if nodes else gpu_nodes
    unpriced = sorted(gpu_nodes - priced)
    if not opencost:
        found = f"GPU prices for {len(priced)} node(s)" if priced else "no OpenCost GPU prices in the window"
        window.add(
            OPENCOST, "GPU prices", found, Verdict.OK, "nothing needed: prices come from the rate card"
        )
        return
    if not priced:
        window.add(
            OPENCOST,
            "GPU prices",
            "no OpenCost GPU prices (node_gpu_hourly_cost) in the window",
            Verdict.MISBILLS,
            "scrape OpenCost into this server, or set rate_card.price_source: rate_card with prices",
            "every GPU-hour is priced at nothing: the invoices come out at zero",
        )
    elif unpriced:
        window.add(
            OPENCOST,
            "GPU prices",
            f"{len(unpriced)} GPU node(s) have no OpenCost price: {few(unpriced)}",
            Verdict.MISBILLS,
            "check OpenCost's node pricing for those nodes (instance type, region)",
            "the GPU time on those nodes is priced at nothing",
        )
    else:
        window.add(
            OPENCOST,
            "GPU prices",
            f"every GPU node ({len(gpu_nodes)}) has an OpenCost price",
            Verdict.OK,
            "nothing needed",
        )
