"""Learning algorithms, one per file."""
