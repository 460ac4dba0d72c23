"""halfprec bench: speed, memory and accuracy of each variant, measured in one interleaved run."""
