"""Widgets of the app: plots of run data."""
