"""Jupyter pages in headless Chromium against a real server. Marker ``browser``."""
