"""Request and response shapes, one module per resource (``JobCreate`` in, ``JobPublic`` out, ...).

Every input model forbids unknown fields and rejects NaN/infinity, so a typo is a 422 naming the
field rather than a silently ignored value.
"""
