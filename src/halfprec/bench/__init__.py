"""halfprec bench: speed, memory and accuracy of each variant against fp32 in one run."""
