"""Migration scripts, oldest first (``NNNN_<what>.py``)."""
