"""Package-wide checks: the contract with other packages' internals, the layering, the public import
paths, the benchmark runner. No kernel. Marker ``package``."""
