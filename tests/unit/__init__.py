"""The unit layer: in-process, seconds in all (``python -m pytest tests/unit``)."""
