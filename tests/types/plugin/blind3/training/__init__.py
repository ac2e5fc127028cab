"""Training loops over effax effects."""
