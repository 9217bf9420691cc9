"""The operator console's shared admin base (:mod:`.base`) and how the console and the
invoice documents show values (:mod:`.display`)."""
