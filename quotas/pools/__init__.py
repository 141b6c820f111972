"""Capacity pools: their frozen config, members, the weighted max-min division, ledgers, and the adaptive budget."""
