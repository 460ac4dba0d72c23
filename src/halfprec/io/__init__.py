"""Files in and out: checkpoints, input files, model specs, the zoo, atomic writes, safe loading."""
