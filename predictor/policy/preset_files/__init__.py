"""Named policy presets as YAML overlays (data only; loaded by ``predictor.policy.presets``)."""
