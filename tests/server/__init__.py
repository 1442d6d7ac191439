"""Through a real jupyter_server (a subprocess): SharedChannelsConnection, the outputs writers,
the paused subscriber. Marker ``server``."""
