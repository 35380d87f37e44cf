"""Re-rankers, one module each, registered by name (see base.MODELS)."""
