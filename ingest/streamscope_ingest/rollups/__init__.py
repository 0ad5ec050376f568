"""Figures counted once at write time, per interval and per stream, for the panels and the attribution job."""
