"""Events: the envelope, filters and joins every pattern shares."""
