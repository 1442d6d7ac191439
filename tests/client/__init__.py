"""The client side (ipykernel_ext.client): RouterClient against real kernels. Marker ``client``."""
