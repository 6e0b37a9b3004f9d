"""Sound out: the wire formats and their encoders, the sample rates, the time-stretch after the model."""
