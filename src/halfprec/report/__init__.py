"""Rendering of results: tables, JSON and plots, one module per result type."""
