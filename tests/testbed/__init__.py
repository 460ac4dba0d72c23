"""Models with known half-precision hazards, shared by the tests and the benchmarks."""
