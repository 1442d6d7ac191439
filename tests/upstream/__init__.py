"""ipykernel's own test suite against the drop-in. Marker ``upstream``."""
