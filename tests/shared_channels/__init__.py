"""The relay (ipykernel_ext.shared_channels) used as a library with real kernels, no server.
Marker ``shared_channels``."""
