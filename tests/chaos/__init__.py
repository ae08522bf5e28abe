"""Kills, pauses and crash points; the machine-explored protocols."""
