"""What the tools share: staged writes and output folders, secrets, dtype names, source names, config overrides."""
