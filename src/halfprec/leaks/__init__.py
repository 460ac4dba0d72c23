"""Dtype leaks: the runtime audit and the static lint."""
